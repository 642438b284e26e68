import { spawnSync } from "node:child_process"
import { describe, expect, it } from "@effect/vitest"

/** Runs a module body in a fresh node (with tsx) and answers its stdout and exit code. */
const run = (body: string) => {
  const child = spawnSync(process.execPath, ["--import", "tsx", "--input-type=module", "--eval", body], {
    cwd: process.cwd(),
    encoding: "utf8"
  })
  return { stdout: child.stdout, status: child.status }
}

describe("batched JSON log lines", () => {
  it("are all written, in order, when the process exits before the batch is flushed", () => {
    const { stdout, status } = run(`
      import { Effect } from "effect"
      import { JsonLogLive, writeLogLine } from "./src/observability/LogSink.ts"
      for (let i = 0; i < 1000; i++) writeLogLine(JSON.stringify({ n: i }))
      Effect.runSync(Effect.logInfo("through the logger").pipe(Effect.provide(JsonLogLive)))
      process.exit(3)
    `)
    expect(status).toBe(3)
    const lines = stdout.trim().split("\n")
    expect(lines).toHaveLength(1001)
    expect(lines.slice(0, 1000).map((line) => (JSON.parse(line) as { n: number }).n)).toEqual(
      Array.from({ length: 1000 }, (_, i) => i)
    )
    expect(JSON.parse(lines[1000]!)).toMatchObject({ message: "through the logger", logLevel: "INFO" })
  })

  it("are written by the timer while the process runs on", () => {
    const { stdout } = run(`
      import { writeLogLine } from "./src/observability/LogSink.ts"
      import { writeSync } from "node:fs"
      writeLogLine("first")
      // The batch timer is due before this one (timers fire in order of their due time, however
      // busy the machine): the line is written on its own while the process runs on.
      setTimeout(() => writeSync(1, "marker\\n"), 200)
    `)
    expect(stdout).toBe("first\nmarker\n")
  })
})
