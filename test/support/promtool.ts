/**
 * Prometheus' own linter (Debian's `prometheus` package): CI installs it; elsewhere the checks that
 * need it are skipped, saying so once.
 */
import { spawnSync } from "node:child_process"
import { existsSync } from "node:fs"

const PROMTOOL = "/usr/bin/promtool"

/** No promtool here, and not in CI (where its absence must fail, not skip). */
export const withoutPromtool = !existsSync(PROMTOOL) && (process.env.CI ?? "") === ""
if (withoutPromtool) console.warn(`promtool checks are skipped: no ${PROMTOOL} (apt-get install prometheus)`)

/** What `promtool check metrics` says of a scrape: "" when it passes. */
export const promtoolProblems = (text: string) => {
  const check = spawnSync(PROMTOOL, ["check", "metrics"], { input: text, encoding: "utf8" })
  return `${check.stdout ?? ""}${check.stderr ?? ""}${check.status === 0 ? "" : `exit ${check.status}`}`.trim()
}
