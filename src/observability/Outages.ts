/**
 * An outage of a dependency (the database, the chain) is logged, not shouted: one WARN line when it
 * becomes unavailable, one WARN summary every SUMMARY_EVERY while it stays so (how many requests
 * were refused and background jobs failed meanwhile), one INFO line when it is back. What fails on
 * it reports here (`reportUnavailable`) instead of logging a line (and a stack trace) each time.
 *
 * Whether it is back is probed (`SELECT 1`, the chain's latest block) every PROBE_EVERY while it is
 * down: it is back when a probe answers and nothing was refused since the previous probe started,
 * so a dependency that answers probes but still fails requests (a pool starved by lock waits)
 * stays down instead of flapping between the two lines.
 */
import { Cause, Clock, Context, Duration, Effect, Layer, Option, Predicate, Queue, Ref } from "effect"
import { isDatabaseUnavailable } from "../storage/Sql.js"
import { describeError } from "./ErrorLine.js"

export type Dependency = "database" | "chain"

/** A request refused, or a background job's tick failed. */
export type Refusal = "request" | "job"

export interface OutagesShape {
  /** `dependency` could not be used; `reason` says why, on one line. */
  readonly refused: (dependency: Dependency, reason: string, refusal: Refusal) => Effect.Effect<void>
}

export class Outages extends Context.Tag("app/Outages")<Outages, OutagesShape>() {}

const PROBE_EVERY = Duration.seconds(1)
const PROBE_TIMEOUT = Duration.seconds(2)
const SUMMARY_EVERY = Duration.seconds(10)

interface Down {
  readonly since: number
  readonly requests: number
  readonly jobs: number
  readonly lastRefusal: number
}

/** A reason on one line, cut short: it goes into a log line, never a stack trace. */
const oneLine = (reason: string) => {
  const flat = reason.replace(/\s+/g, " ").trim()
  return flat.length <= 300 ? flat : `${flat.slice(0, 299)}…`
}

const counts = ({ requests, jobs }: Down) =>
  `${requests} request${requests === 1 ? "" : "s"} refused, ${jobs} background job${jobs === 1 ? "" : "s"} failed`

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`

/**
 * The dependency a failure says is unavailable, with why: a database that cannot answer (a failure
 * or a defect: repositories die with it), a chain that did not answer. None for any other failure.
 */
export const outageOf = <E>(
  cause: Cause.Cause<E>
): Option.Option<{ readonly dependency: Dependency; readonly reason: string }> => {
  const error = Option.orElse(Cause.failureOption<unknown>(cause), () => Cause.dieOption(cause))
  if (Option.isNone(error)) return Option.none()
  if (isDatabaseUnavailable(error.value)) {
    return Option.some({ dependency: "database", reason: describeError(error.value) })
  }
  // The chain port's failure (chain/ChainClient.ts), known by its tag: the platform imports no domain.
  if (Predicate.isTagged(error.value, "ChainError") && Predicate.hasProperty(error.value, "message")) {
    return Option.some({ dependency: "chain", reason: String(error.value.message) })
  }
  return Option.none()
}

/**
 * Reports that `dependency` could not be used. Where no `Outages` is provided (a service built
 * alone in a test), it is one WARN line with the reason, still without a stack trace.
 */
export const reportUnavailable = (dependency: Dependency, reason: string, refusal: Refusal) =>
  Effect.flatMap(Effect.serviceOption(Outages), (outages) =>
    Option.isSome(outages)
      ? outages.value.refused(dependency, reason, refusal)
      : Effect.logWarning(`${dependency} unavailable: ${oneLine(reason)}`)
  )

/** Tracks each dependency: up, or down since when and what it refused meanwhile. */
const make = (probes: Record<Dependency, Effect.Effect<unknown, unknown>>) =>
  Effect.gen(function* () {
    const states = {
      database: yield* Ref.make(Option.none<Down>()),
      chain: yield* Ref.make(Option.none<Down>())
    } satisfies Record<Dependency, Ref.Ref<Option.Option<Down>>>
    // One watcher per dependency, started below (not by the request that saw the outage first,
    // whose log annotations and span it would carry), woken when an outage starts.
    const outageStarted = {
      database: yield* Queue.sliding<void>(1),
      chain: yield* Queue.sliding<void>(1)
    } satisfies Record<Dependency, Queue.Queue<void>>

    /** While `dependency` is down: probes it, summarises, and says when it is back. */
    const watch = (dependency: Dependency) =>
      Effect.gen(function* () {
        const state = states[dependency]
        let summarisedAt = yield* Clock.currentTimeMillis
        // the start of the previous probe (at first, of the outage's first refusal)
        let checkedSince = summarisedAt
        for (;;) {
          yield* Effect.sleep(PROBE_EVERY)
          const probedAt = yield* Clock.currentTimeMillis
          const answered = yield* probes[dependency].pipe(Effect.timeout(PROBE_TIMEOUT), Effect.isSuccess)
          const now = yield* Clock.currentTimeMillis
          // Decided and cleared at once, so that a refusal meanwhile is not lost.
          const since = checkedSince
          const [down, back] = yield* Ref.modify(
            state,
            (current): readonly [readonly [Option.Option<Down>, boolean], Option.Option<Down>] => {
              const back = answered && Option.exists(current, (d) => d.lastRefusal < since)
              return [[current, back], back ? Option.none() : current]
            }
          )
          checkedSince = probedAt
          if (Option.isNone(down)) return
          if (back) {
            return yield* Effect.logInfo(
              `${dependency} available again after ${seconds(now - down.value.since)}; meanwhile ${counts(down.value)}`
            ).pipe(
              Effect.annotateLogs({
                outageMs: now - down.value.since,
                requests: down.value.requests,
                jobs: down.value.jobs
              })
            )
          }
          if (now - summarisedAt >= Duration.toMillis(SUMMARY_EVERY)) {
            summarisedAt = now
            yield* Effect.logWarning(
              `${dependency} still unavailable after ${seconds(now - down.value.since)}; so far ${counts(down.value)}`
            ).pipe(
              Effect.annotateLogs({
                outageMs: now - down.value.since,
                requests: down.value.requests,
                jobs: down.value.jobs
              })
            )
          }
        }
      }).pipe(Effect.annotateLogs("dependency", dependency))

    const refused = (dependency: Dependency, reason: string, refusal: Refusal) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const first = yield* Ref.modify(states[dependency], (current): readonly [boolean, Option.Option<Down>] => {
          const down = Option.getOrElse(current, () => ({ since: now, requests: 0, jobs: 0, lastRefusal: now }))
          return [
            Option.isNone(current),
            Option.some({
              ...down,
              requests: down.requests + (refusal === "request" ? 1 : 0),
              jobs: down.jobs + (refusal === "job" ? 1 : 0),
              lastRefusal: now
            })
          ]
        })
        if (!first) return
        yield* Effect.logWarning(
          `${dependency} unavailable: ${oneLine(reason)}; refusals are counted and summarised every ` +
            `${Duration.format(SUMMARY_EVERY)} until it is back`
        ).pipe(Effect.annotateLogs("dependency", dependency))
        yield* Queue.offer(outageStarted[dependency], undefined)
      })

    for (const dependency of ["database", "chain"] as const) {
      yield* Queue.take(outageStarted[dependency]).pipe(
        Effect.zipRight(watch(dependency).pipe(Effect.withSpan(`Outages.watch.${dependency}`, { root: true }))),
        Effect.forever,
        Effect.forkScoped
      )
    }

    return Outages.of({ refused })
  })

/** An outage tracker over the given probes (tests give their own). */
export const outagesLayer = (probes: Record<Dependency, Effect.Effect<unknown, unknown>>) =>
  Layer.scoped(Outages, make(probes))
