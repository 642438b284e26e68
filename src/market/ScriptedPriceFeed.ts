/**
 * A price source for tests: every quote answers, fails, dies or hangs as the test says, with one
 * settable price (or one per symbol) and pause flags. It counts the reads, and a gate makes
 * answering reads wait until the test opens it.
 *
 *     layer(testServer({}, { priceFeed: ScriptedPriceFeed.layer() }))(...)
 */
import { Context, Deferred, Effect, Layer, Option, Ref } from "effect"
import type { StockToken } from "../chain/Tokens.js"
import { PriceFeed, PriceFeedError, type Quote } from "./PriceFeed.js"

/** `stubborn`: hangs for an hour (of the clock in use) and cannot be interrupted meanwhile, then hangs for good. */
export type FeedBehaviour = "answer" | "fail" | "die" | "hang" | "stubborn"

export interface ScriptedPriceFeedShape {
  readonly behaviour: Ref.Ref<FeedBehaviour>
  /** The price of every token without one of its own in `prices`. */
  readonly price: Ref.Ref<number>
  /** Prices by symbol. */
  readonly prices: Ref.Ref<ReadonlyMap<string, number>>
  /** Symbols whose platform reports them paused. */
  readonly paused: Ref.Ref<ReadonlySet<string>>
  /** Reads so far. */
  readonly calls: Ref.Ref<number>
  /** When set, an answering read waits for it first. */
  readonly gate: Ref.Ref<Option.Option<Deferred.Deferred<void>>>
}

export class ScriptedPriceFeed extends Context.Tag("app/ScriptedPriceFeed")<
  ScriptedPriceFeed,
  ScriptedPriceFeedShape
>() {
  /** The price source (as `PriceFeed`) and its script: answering $100 until told otherwise. */
  static readonly layer = (initialPrice = 100) =>
    Layer.effectContext(
      Effect.gen(function* () {
        const script: ScriptedPriceFeedShape = {
          behaviour: yield* Ref.make<FeedBehaviour>("answer"),
          price: yield* Ref.make(initialPrice),
          prices: yield* Ref.make<ReadonlyMap<string, number>>(new Map()),
          paused: yield* Ref.make<ReadonlySet<string>>(new Set()),
          calls: yield* Ref.make(0),
          gate: yield* Ref.make(Option.none<Deferred.Deferred<void>>())
        }
        const quote = (token: StockToken) =>
          Effect.gen(function* () {
            yield* Ref.update(script.calls, (n) => n + 1)
            const gate = yield* Ref.get(script.gate)
            if (Option.isSome(gate)) yield* Deferred.await(gate.value)
            switch (yield* Ref.get(script.behaviour)) {
              case "fail":
                return yield* new PriceFeedError({ message: `${token.symbol}: feed down (scripted)` })
              case "die":
                return yield* Effect.die(new Error("feed bug (scripted)"))
              case "hang":
                return yield* Effect.never
              case "stubborn":
                return yield* Effect.uninterruptible(Effect.sleep("1 hour")).pipe(Effect.zipRight(Effect.never))
              case "answer": {
                const own = (yield* Ref.get(script.prices)).get(token.symbol)
                const paused = (yield* Ref.get(script.paused)).has(token.symbol)
                return {
                  price: own ?? (yield* Ref.get(script.price)),
                  updatedAt: 0,
                  platformStatus: paused ? "paused" : "open"
                } satisfies Quote
              }
            }
          })
        const feed = PriceFeed.of({
          quote,
          // each token's quote on its own, as the script counts them
          quotes: (tokens) =>
            Effect.forEach(tokens, (token) => Effect.either(quote(token)), { concurrency: "unbounded" })
        })
        return Context.make(PriceFeed, feed).pipe(Context.add(ScriptedPriceFeed, script))
      })
    )
}
