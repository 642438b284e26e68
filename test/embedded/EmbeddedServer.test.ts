/**
 * `superviseServer` on a small real process (`sh` printing a readiness line, then sleeping): killed,
 * it is started again after one ERROR line; when restarts keep failing the service is halted with
 * `EmbeddedServerLost`; a scope that closes stops it without any line about a crash.
 */
import { describe, expect, it } from "@effect/vitest"
import { Deferred, Effect, Logger, Option, Ref } from "effect"
import {
  EmbeddedServerError,
  type EmbeddedServerLost,
  isAlive,
  ServiceHalt,
  startServer,
  superviseServer
} from "../../src/embedded/EmbeddedServer.js"
import { eventually } from "../support/wait.js"

/** Log lines written while `effect` runs, as `LEVEL message`. */
const capturingLogs = Effect.gen(function* () {
  const lines = yield* Ref.make<ReadonlyArray<string>>([])
  const logger = Logger.make(({ logLevel, message }) => {
    const text = Array.isArray(message) ? message.join(" ") : String(message)
    Effect.runSync(Ref.update(lines, (all) => [...all, `${logLevel.label} ${text}`]))
  })
  return { lines: Ref.get(lines), layer: Logger.replace(Logger.defaultLogger, logger) }
})

const sleeper = startServer({
  server: "sleeper",
  binary: "/bin/sh",
  args: ["-c", "echo ready; exec sleep 600"],
  ready: /ready/,
  readyTimeout: "10 seconds",
  stopSignal: "SIGTERM",
  stopGrace: "2 seconds"
})

const fastPolicy = {
  maxFailures: 3,
  firstBackoff: "10 millis",
  maxBackoff: "50 millis",
  stableAfter: "1 hour"
} as const

describe("superviseServer", () => {
  it.scopedLive("a server killed from outside is started again, with one ERROR line naming how it ended", () =>
    Effect.gen(function* () {
      const logs = yield* capturingLogs
      const pids = yield* Ref.make<ReadonlyArray<number>>([])
      const first = yield* superviseServer({
        server: "sleeper",
        path: "/nowhere",
        start: Effect.tap(sleeper, (running) => Ref.update(pids, (all) => [...all, running.pid])),
        policy: fastPolicy
      }).pipe(Effect.provide(logs.layer))
      process.kill(first.pid, "SIGKILL")
      yield* eventually("a second sleeper to run", Ref.get(pids), (all) => all.length === 2 && isAlive(all[1]!))
      yield* eventually("the restart to be logged", logs.lines, (lines) =>
        lines.some((line) => line.startsWith("INFO sleeper restarted after "))
      )
      expect((yield* logs.lines).filter((line) => line.startsWith("ERROR"))).toEqual([
        "ERROR sleeper exited unexpectedly: it was killed by SIGKILL; restarting it"
      ])
    })
  )

  it.scopedLive("restarts that keep failing halt the service once, naming the server and the last failure", () =>
    Effect.gen(function* () {
      const logs = yield* capturingLogs
      const halted = yield* Deferred.make<EmbeddedServerLost>()
      const starts = yield* Ref.make(0)
      const first = yield* superviseServer({
        server: "sleeper",
        path: "/nowhere",
        // the first start works, every later one fails
        start: Effect.flatMap(
          Ref.getAndUpdate(starts, (n) => n + 1),
          (n) =>
            n === 0
              ? sleeper
              : Effect.fail(new EmbeddedServerError({ server: "sleeper", path: "/bin/sh", reason: "port in use" }))
        ),
        // every run counts as stable: the three failures are the three restarts
        policy: { ...fastPolicy, stableAfter: "0 millis" }
      }).pipe(
        Effect.provide(logs.layer),
        Effect.provideService(ServiceHalt, { halt: (error) => Deferred.succeed(halted, error) })
      )
      process.kill(first.pid, "SIGTERM")
      const lost = yield* Option.getOrThrow(
        yield* eventually("the service to be halted", Deferred.poll(halted), Option.isSome)
      )
      expect(lost.message).toBe(
        "sleeper (/nowhere) exited and could not be restarted: 3 failures in a row; the last: port in use"
      )
      expect(yield* Ref.get(starts)).toBe(4)
      const lines = yield* logs.lines
      expect(lines.filter((line) => line.startsWith("ERROR"))).toEqual([
        "ERROR sleeper exited unexpectedly: it was killed by SIGTERM; restarting it"
      ])
      expect(lines.filter((line) => line.startsWith("WARN"))).toHaveLength(3)
    })
  )

  it.live("closing the scope stops the server and logs nothing about it", () =>
    Effect.gen(function* () {
      const logs = yield* capturingLogs
      const pid = yield* Effect.scoped(
        superviseServer({ server: "sleeper", path: "/nowhere", start: sleeper, policy: fastPolicy }).pipe(
          Effect.map((running) => running.pid),
          Effect.provide(logs.layer)
        )
      )
      yield* eventually(
        "the sleeper to stop",
        Effect.sync(() => isAlive(pid)),
        (alive) => !alive
      )
      expect(yield* logs.lines).toEqual([])
    })
  )
})
