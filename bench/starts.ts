/**
 * `npm start` as a user runs it, for the compare tool's `start` measure: nothing configured (the
 * embedded PostgreSQL and devnet under DATA_DIR), in the checkout's own `start` command. A start is
 * spawn to the first 200 from /health (polled every 10 ms), then the resident memory 3 s later.
 */
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { Effect } from "effect"
import { freePort } from "../src/embedded/EmbeddedPostgres.js"
import { basePath, rssMb, startScript } from "./harness.js"

export interface Start {
  readonly readyMs: number
  readonly rssMb: number
}

/** One start of `root`'s service on `dataDir` (created by its first start, reused by the next). */
export const startOnce = async (root: string, dataDir: string, options: { readonly profileDir?: string } = {}) => {
  const port = await Effect.runPromise(freePort)
  const start = startScript(root)
  if (!start.startsWith("node ")) throw new Error(`the start script of ${root} does not run node: ${start}`)
  const flags = options.profileDir === undefined ? "" : `--cpu-prof --cpu-prof-dir=${options.profileDir} `
  const began = performance.now()
  const server = spawn("sh", ["-c", `exec node ${flags}${start.slice("node ".length)}`], {
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
    env: { PATH: basePath(root), HOME: process.env.HOME, PORT: String(port), DATA_DIR: dataDir }
  })
  const exited = new Promise<void>((resolve) => server.once("exit", () => resolve()))
  let readyMs = Number.NaN
  while (Number.isNaN(readyMs)) {
    if (server.exitCode !== null) throw new Error(`the service of ${root} exited with ${server.exitCode}`)
    const ok = await fetch(`http://127.0.0.1:${port}/health`).then(
      (response) => response.ok,
      () => false
    )
    if (ok) readyMs = performance.now() - began
    else await new Promise((resolve) => setTimeout(resolve, 10))
  }
  await new Promise((resolve) => setTimeout(resolve, 3_000))
  const rss = rssMb(server.pid!)
  server.kill("SIGTERM")
  await exited
  return { readyMs, rssMb: rss } satisfies Start
}

/** A data directory of its own, and its removal. */
export const dataDirectory = () => {
  const dir = mkdtempSync(path.join(tmpdir(), "card-service-start-"))
  return { dir, remove: () => rmSync(dir, { recursive: true, force: true, maxRetries: 5 }) }
}
