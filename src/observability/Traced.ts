/**
 * `traced(name)(function* (...) {...})`: `Effect.fn(name)` while tracing is on (an OTLP endpoint is
 * set: Observability.ts), a plain generator function otherwise. `Effect.fn` captures a stack trace
 * and makes a span (a no-op one, still allocated and registered) on every call whether or not
 * anything records it: in a request's profile that was a visible share of its CPU and garbage.
 */
import { Effect, FiberRef } from "effect"
import type { YieldWrap } from "effect/Utils"

export const traced =
  (name: string) =>
  // biome-ignore lint/suspicious/noExplicitAny: the same constraint as Effect.fn's
  <Eff extends YieldWrap<Effect.Effect<any, any, any>>, AEff, Args extends Array<any>>(
    body: (...args: Args) => Generator<Eff, AEff, never>
  ) => {
    const spanned = Effect.fn(name)(body)
    const plain = Effect.fnUntraced(body)
    return ((...args: Args) =>
      Effect.withFiberRuntime((fiber) =>
        fiber.getFiberRef(FiberRef.currentTracerEnabled) ? spanned(...args) : plain(...args)
      )) as typeof spanned
  }
