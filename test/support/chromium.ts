/**
 * A real headless Chromium (Debian's, at /usr/bin/chromium, driven by playwright-core) for tests
 * of pages a person opens. Without it such tests are skipped with a message, except under CI,
 * where they must run.
 */
import { existsSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { Effect } from "effect"
import { chromium } from "playwright-core"

const CHROMIUM = "/usr/bin/chromium"

/** Whether a test that needs Chromium is skipped; warns once per test file that skips. */
export const skipWithoutChromium = (testFile: string) => {
  const available = existsSync(CHROMIUM)
  const mustRun = process.env.CI !== undefined && process.env.CI !== ""
  if (!available && !mustRun) {
    console.warn(`${testFile} skipped: no chromium at ${CHROMIUM} (apt-get install chromium); CI always runs it`)
  }
  return !available && !mustRun
}

/** A fresh headless Chromium profile, closed and removed with the scope. */
export const browser = Effect.acquireRelease(
  Effect.promise(async () => {
    // A fresh profile each time; playwright passes it to Chromium as --user-data-dir.
    const profile = mkdtempSync(path.join(tmpdir(), "test-chromium-"))
    const context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync"
      ]
    })
    return { context, profile }
  }),
  ({ context, profile }) =>
    Effect.promise(async () => {
      await context.close()
      rmSync(profile, { recursive: true, force: true })
    })
)
