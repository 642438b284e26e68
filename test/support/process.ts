import { type ChildProcess, spawn } from "node:child_process"
import { Effect, Schedule } from "effect"

export interface ServiceProcess {
  readonly child: ChildProcess
  readonly baseUrl: string
  readonly output: () => string
}

/** Starts `src/main.ts` as `npm start` does, with exactly the environment given (plus PATH/HOME). */
export const startService = (env: Record<string, string>) =>
  Effect.gen(function* () {
    let output = ""
    const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
      cwd: process.cwd(),
      env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
      stdio: ["ignore", "pipe", "pipe"]
    })
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString()
    })
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString()
    })
    const baseUrl = `http://127.0.0.1:${env.PORT ?? "3000"}`
    const exited = Effect.async<void>((resume) => {
      child.once("exit", () => resume(Effect.void))
    })
    const healthy = Effect.tryPromise(() =>
      fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2_000) }).then((r) =>
        r.ok ? r : Promise.reject(r.status)
      )
    ).pipe(Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo("60 seconds"))))
    yield* Effect.raceFirst(healthy, Effect.zipRight(exited, Effect.fail("exited"))).pipe(
      Effect.orDieWith(() => new Error(`service did not become healthy:\n${output}`))
    )
    return { child, baseUrl, output: () => output } satisfies ServiceProcess
  })

/** Sends a signal and waits for the exit code (null when killed by the signal). */
export const stopService = (service: ServiceProcess, signal: NodeJS.Signals) =>
  Effect.async<number | null>((resume) => {
    if (service.child.exitCode !== null) return resume(Effect.succeed(service.child.exitCode))
    service.child.once("exit", (code) => resume(Effect.succeed(code)))
    service.child.kill(signal)
  })
