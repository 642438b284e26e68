/**
 * The outage log on a test clock: one WARN when a dependency becomes unavailable, a WARN summary
 * every 10 s with the counts, one INFO when a probe answers and nothing was refused since; a
 * dependency that answers probes while requests still fail stays down.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Layer, Logger, Ref, TestClock, TestContext } from "effect"
import { Outages, outagesLayer } from "../../src/observability/Outages.js"

/** Log lines as `LEVEL message`, and a probe the test switches. */
const harness = Effect.gen(function* () {
  const lines = yield* Ref.make<ReadonlyArray<string>>([])
  const databaseAnswers = yield* Ref.make(false)
  const logger = Logger.make(({ logLevel, message }) => {
    const text = Array.isArray(message) ? message.join(" ") : String(message)
    Effect.runSync(Ref.update(lines, (all) => [...all, `${logLevel.label} ${text}`]))
  })
  const probe = Effect.flatMap(Ref.get(databaseAnswers), (up) => (up ? Effect.void : Effect.fail("refused")))
  const layer = outagesLayer({ database: probe, chain: Effect.void }).pipe(
    Layer.provide(Logger.replace(Logger.defaultLogger, logger))
  )
  return { lines: Ref.get(lines), databaseAnswers, layer }
})

describe("Outages", () => {
  it.live("one WARN, a summary every 10 s with the counts, one INFO once a probe answers", () =>
    Effect.gen(function* () {
      const { lines, databaseAnswers, layer } = yield* harness
      const outages = yield* Layer.build(layer).pipe(Effect.map((context) => context.unsafeMap.get(Outages.key)))
      const { refused } = outages as Outages["Type"]
      yield* refused("database", "connect ECONNREFUSED 127.0.0.1:5432", "request")
      for (let i = 0; i < 99; i++) yield* refused("database", "connect ECONNREFUSED 127.0.0.1:5432", "request")
      yield* refused("database", "settlement-heartbeat: connect ECONNREFUSED", "job")
      expect(yield* lines).toEqual([
        "WARN database unavailable: connect ECONNREFUSED 127.0.0.1:5432; refusals are counted and summarised every 10s until it is back"
      ])

      // 20 s down, refusing all along: two summaries, nothing else
      for (let second = 0; second < 20; second++) {
        yield* refused("database", "again", "request")
        yield* TestClock.adjust("1 second")
      }
      expect((yield* lines).slice(1)).toEqual([
        "WARN database still unavailable after 10.0 s; so far 110 requests refused, 1 background job failed",
        "WARN database still unavailable after 20.0 s; so far 120 requests refused, 1 background job failed"
      ])

      // The probe answers, but a request was refused during that probe: still down.
      yield* Ref.set(databaseAnswers, true)
      yield* refused("database", "again", "request")
      yield* TestClock.adjust("1 second")
      expect(yield* lines).toHaveLength(3)
      // Nothing refused since: back.
      yield* TestClock.adjust("1 second")
      expect((yield* lines).slice(3)).toEqual([
        "INFO database available again after 22.0 s; meanwhile 121 requests refused, 1 background job failed"
      ])
      // A new outage is a new WARN.
      yield* refused("database", "terminated", "request")
      expect((yield* lines).slice(4)).toEqual([
        "WARN database unavailable: terminated; refusals are counted and summarised every 10s until it is back"
      ])
    }).pipe(
      Effect.scoped,
      // Its test services provided here, not by it.scoped: under one module graph for a worker's
      // files (vitest.config.ts), it.scoped's test clock was at times not in place after another
      // file's server (the clock read back was the live one); provided by the test, it always is.
      Effect.provide(TestContext.TestContext)
    )
  )
})
