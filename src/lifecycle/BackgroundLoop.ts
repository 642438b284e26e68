/**
 * Background loops (price refresh, settlement reconciliation, the agent, retention, rate-limit
 * sync) run in a fiber owned by a scope, so they start with the service and are interrupted at
 * shutdown. Each tick is a root span `job.<name>` and logs with `job=<name>`; a tick that fails or
 * dies is logged and the next one runs on schedule: a loop never stops on its own. A tick that
 * failed because the database or the chain is unavailable is counted in that outage (Outages.ts),
 * not logged on its own. A loop that holds leases in the database gives them back when it stops
 * (`release`), so that another replica, or this service started again, takes its work up at once
 * instead of waiting for them to expire.
 */
import { Cause, Duration, Effect, Layer, Option, Schedule, type Scope } from "effect"
import { outageOf, reportUnavailable } from "../observability/Outages.js"

export interface Loop<E, R> {
  readonly tick: Effect.Effect<unknown, E, R>
  /** The pause between the end of one tick and the start of the next. */
  readonly every: Duration.DurationInput
  /** When the first tick runs, if not at start-up: for a loop that has nothing to do before then. */
  readonly firstAfter?: Duration.DurationInput
  /**
   * Run once when the loop's scope closes, after the loop was interrupted (no tick runs any more):
   * what it holds is given back. Bounded by RELEASE_LIMIT, failures ignored: the database may be why
   * the service stops, and what is not given back expires as it would have.
   */
  readonly release?: Effect.Effect<unknown, unknown, R>
}

/** The longest a loop's `release` may take at shutdown. */
const RELEASE_LIMIT = Duration.seconds(2)

/**
 * Starts the loop in a fiber of the current scope: for a service whose loop works on the service's
 * own state (it forks the loop while it is built).
 */
export const forkLoop = <E, R>(
  name: string,
  { tick, every, firstAfter, release }: Loop<E, R>
): Effect.Effect<void, never, R | Scope.Scope> =>
  Effect.zipRight(
    // Added before the loop is forked, so it runs after the loop is interrupted.
    release === undefined
      ? Effect.void
      : Effect.addFinalizer(() =>
          release.pipe(Effect.timeout(RELEASE_LIMIT), Effect.exit, Effect.annotateLogs("job", name))
        ),
    forkTicks(name, tick, every, firstAfter)
  )

const forkTicks = <E, R>(
  name: string,
  tick: Effect.Effect<unknown, E, R>,
  every: Duration.DurationInput,
  firstAfter: Duration.DurationInput | undefined
) =>
  tick.pipe(
    Effect.withSpan(`job.${name}`, { root: true }),
    Effect.catchAllCause((cause) => {
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
      const outage = outageOf(cause)
      return Option.isSome(outage)
        ? reportUnavailable(outage.value.dependency, `${name}: ${outage.value.reason}`, "job")
        : Effect.logError(`${name} failed`, cause)
    }),
    Effect.repeat(Schedule.spaced(every)),
    (loop) => (firstAfter === undefined ? loop : Effect.delay(loop, firstAfter)),
    Effect.annotateLogs("job", name),
    Effect.forkScoped,
    Effect.asVoid
  )

/** A loop in a layer of its own; `setup` reads whatever the tick and its pace need. */
export const backgroundLoop = <E, R, SE, SR>(name: string, setup: Effect.Effect<Loop<E, R>, SE, SR>) =>
  Layer.scopedDiscard(Effect.flatMap(setup, (loop) => forkLoop(name, loop)))
