/**
 * Background loops (price refresh, settlement reconciliation, the agent) as scoped layers: the loop
 * runs in a fiber owned by the layer, so it starts with the service and is interrupted at shutdown.
 * Each tick is a root span `job.<name>` and logs with `job=<name>`; a tick that fails or dies is
 * logged and the next one runs on schedule: a loop never stops on its own.
 */
import { Cause, type Duration, Effect, Layer, Schedule } from "effect"

export interface Loop<E, R> {
  readonly tick: Effect.Effect<unknown, E, R>
  /** The pause between the end of one tick and the start of the next. */
  readonly every: Duration.DurationInput
}

/** A loop whose first tick runs at start-up; `setup` reads whatever the tick and its pace need. */
export const backgroundLoop = <E, R, SE, SR>(name: string, setup: Effect.Effect<Loop<E, R>, SE, SR>) =>
  Layer.scopedDiscard(
    Effect.gen(function* () {
      const { tick, every } = yield* setup
      yield* tick.pipe(
        Effect.withSpan(`job.${name}`, { root: true }),
        Effect.catchAllCause((cause) =>
          Cause.isInterruptedOnly(cause) ? Effect.failCause(cause) : Effect.logError(`${name} failed`, cause)
        ),
        Effect.repeat(Schedule.spaced(every)),
        Effect.annotateLogs("job", name),
        Effect.forkScoped
      )
    })
  )
