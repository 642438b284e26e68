/**
 * What /ready asks beyond the database and the chain: the checks the parts of the app that are on
 * add (the demo merchant: settlements left without a receipt). A part adds its check with a layer
 * of its own, beside its handlers, so a part switched off adds none and /ready asks only what runs.
 * The checks are gathered as HttpApi gathers a group's routes: into one registry the app provides.
 */
import { Context, Effect, Layer, type Option, Ref } from "effect"

/** Why the service is not ready, as /ready's 503 says it after "not ready: "; none while all is well. */
export type ReadinessCheck = Effect.Effect<Option.Option<string>, unknown>

export class Readiness extends Context.Tag("health/Readiness")<
  Readiness,
  {
    readonly add: (check: ReadinessCheck) => Effect.Effect<void>
    /** The checks added, in the order the parts were built. */
    readonly checks: Effect.Effect<ReadonlyArray<ReadinessCheck>>
  }
>() {
  static readonly layer = Layer.effect(
    Readiness,
    Effect.map(Ref.make<ReadonlyArray<ReadinessCheck>>([]), (added) => ({
      add: (check: ReadinessCheck) => Ref.update(added, (checks) => [...checks, check]),
      checks: Ref.get(added)
    }))
  )
}

/** A layer that adds `check` to /ready's; the check runs with the services this layer is given. */
export const readinessCheck = <E, R>(check: Effect.Effect<Option.Option<string>, E, R>) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const context = yield* Effect.context<R>()
      const readiness = yield* Readiness
      yield* readiness.add(Effect.provide(check, context))
    })
  )
