import { describe, expect, layer } from "@effect/vitest"
import {
  Cause,
  Chunk,
  Clock,
  ConfigProvider,
  Deferred,
  Duration,
  Effect,
  Exit,
  Fiber,
  Layer,
  Option,
  Ref,
  TestClock
} from "effect"
import { type StockToken, TokenRegistry } from "../../src/chain/Tokens.js"
import { Market, MarketRefreshLive } from "../../src/market/Market.js"
import { ScriptedPriceFeed } from "../../src/market/ScriptedPriceFeed.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const token = (symbol: string, n: number): StockToken => ({
  symbol,
  ticker: symbol,
  name: symbol,
  address: `0x${String(n).padStart(40, "0")}`,
  feed: `0x${String(n + 100).padStart(40, "0")}`,
  decimals: 18,
  platform: "onchain"
})

const Registry = Layer.succeed(TokenRegistry, { chainId: 999_001, tokens: [token("AAA", 1), token("BBB", 2)] })

const marketWith = (env: Record<string, string>) =>
  Market.Default.pipe(
    Layer.provideMerge(ScriptedPriceFeed.layer()),
    Layer.provide(Registry),
    Layer.provideMerge(TestDatabase),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )

const NOW = Date.parse("2026-11-21T17:00:00Z")

// ---------------------------------------------------------------------------------------------------

layer(marketWith({}), { timeout: "30 seconds" })(
  "reads under a test clock (defaults: 30 s staleness, 2 s timeout)",
  (it) => {
    it.effect("the market serves the registry's tokens; settings have their defaults", () =>
      Effect.gen(function* () {
        const market = yield* Market
        expect(market.tokens.map((t) => [t.symbol, t.platform])).toEqual([
          ["AAA", "onchain"],
          ["BBB", "onchain"]
        ])
        expect(Duration.toMillis(market.settings.readTimeout)).toBe(2000)
        expect(Duration.toMillis(market.settings.maxStaleness)).toBe(30_000)
        expect(Duration.toMillis(market.settings.refreshInterval)).toBe(5000)
      })
    )

    it.effect("a hanging feed: a fresh cached price is answered at once, without asking the feed", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const market = yield* Market
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.behaviour, "answer")
        yield* Ref.set(script.price, 101)
        yield* market.refresh
        yield* Ref.set(script.behaviour, "hang")
        yield* Ref.set(script.calls, 0)
        yield* TestClock.adjust("30 seconds") // still within PRICE_MAX_STALENESS
        const fiber = yield* Effect.fork(market.marketData("AAA"))
        const exit = yield* Fiber.join(fiber).pipe(Effect.exit)
        expect(exit).toEqual(Exit.succeed(expect.objectContaining({ tokenPrice: 101 })))
        expect(yield* Ref.get(script.calls)).toBe(0)
      })
    )

    it.effect("a hanging feed and a stale cache: PriceUnavailable exactly when the read timeout expires", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const market = yield* Market
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.behaviour, "answer")
        yield* market.refresh
        yield* Ref.set(script.behaviour, "hang")
        yield* TestClock.adjust("31 seconds") // the cached price is now too old
        const fiber = yield* Effect.fork(market.marketData("AAA"))
        yield* TestClock.adjust("1999 millis")
        expect(Option.isNone(yield* Fiber.poll(fiber))).toBe(true)
        yield* TestClock.adjust("1 millis")
        const error = yield* Effect.flip(Fiber.join(fiber))
        expect(error._tag).toBe("PriceUnavailable")
        expect(error.error).toContain("AAA")
      })
    )

    it.effect("a failing feed and a stale cache: PriceUnavailable at once", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW + 3_600_000)
        const market = yield* Market
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.behaviour, "fail")
        const error = yield* Effect.flip(market.marketData("BBB"))
        expect(error._tag).toBe("PriceUnavailable")
        // allMarketData still answers, with null for the tokens without a price.
        const all = yield* market.allMarketData
        expect(all.map((t) => [t.symbol, t.market])).toEqual([
          ["AAA", null],
          ["BBB", null]
        ])
        yield* Ref.set(script.behaviour, "answer")
        expect((yield* market.marketData("BBB")).tokenPrice).toBeGreaterThan(0)
      })
    )

    it.effect("refresh fails only when no feed answers, and never waits past the read timeout", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW + 7_200_000)
        const market = yield* Market
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.behaviour, "hang")
        const fiber = yield* Effect.fork(market.refresh)
        yield* TestClock.adjust("2 seconds")
        const error = yield* Effect.flip(Fiber.join(fiber))
        expect(error._tag).toBe("PriceUnavailable")
        yield* Ref.set(script.behaviour, "answer")
        const ok = yield* market.refresh
        expect(ok.refreshed).toEqual(["AAA", "BBB"])
        expect(ok.failed).toEqual([])
      })
    )

    it.effect("concurrent readers of a stale token share one feed read", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW + 10_800_000)
        const market = yield* Market
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.behaviour, "answer")
        yield* Ref.set(script.price, 123)
        const gate = yield* Deferred.make<void>()
        yield* Ref.set(script.gate, Option.some(gate))
        yield* Ref.set(script.calls, 0)
        const readers = yield* Effect.forkAll(Array.from({ length: 8 }, () => market.marketData("AAA")))
        // Let every reader reach the feed or the lock before the feed answers.
        for (let i = 0; i < 20; i++) yield* Effect.yieldNow()
        yield* Deferred.succeed(gate, undefined)
        const results = yield* Fiber.join(readers)
        yield* Ref.set(script.gate, Option.none())
        expect(results.map((r) => r.tokenPrice)).toEqual(Array(8).fill(123))
        expect(yield* Ref.get(script.calls)).toBe(1)
      })
    )
  }
)

layer(marketWith({ PRICE_READ_TIMEOUT: "300ms", PRICE_MAX_STALENESS: "400ms" }), { timeout: "30 seconds" })(
  "a feed that cannot be interrupted (PRICE_READ_TIMEOUT=300ms, PRICE_MAX_STALENESS=400ms)",
  (it) => {
    it.effect("a reader and a refresh give up at the read timeout, without waiting for the feed to stop", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const market = yield* Market
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.behaviour, "stubborn")
        // Daemons: were they to wait for the feed, the test must fail here rather than hang in its teardown.
        const reader = yield* Effect.forkDaemon(market.marketData("BBB"))
        const refresh = yield* Effect.forkDaemon(market.refresh)
        yield* TestClock.adjust("299 millis")
        expect(Option.isNone(yield* Fiber.poll(reader))).toBe(true)
        yield* TestClock.adjust("1 millis")
        // The feed still resists interruption (for the hour the script gives it), yet both are answered.
        const answered = (what: string, fiber: Fiber.RuntimeFiber<unknown, { readonly _tag: string }>) =>
          eventually(`the ${what} to be answered without the feed`, Fiber.poll(fiber), Option.isSome, {
            atMost: "10 seconds"
          }).pipe(
            Effect.map((exit) => Exit.match(Option.getOrThrow(exit), { onFailure: Cause.squash, onSuccess: (a) => a }))
          )
        expect(yield* answered("reader", reader)).toMatchObject({ _tag: "PriceUnavailable" })
        expect(yield* answered("refresh", refresh)).toMatchObject({ _tag: "PriceUnavailable" })
        yield* TestClock.adjust("1 hour") // lets the stubborn reads end
      })
    )
  }
)

describe("the scheduled refresh", () => {
  layer(marketWith({ PRICE_REFRESH_INTERVAL: "5 seconds" }), { timeout: "30 seconds" })("under a test clock", (it) => {
    /** Waits (in real time: a run writes to the database) until the feed has been called `n` times. */
    const callsReach = (n: number) =>
      Effect.flatMap(ScriptedPriceFeed, (script) =>
        eventually(`${n} feed reads`, Ref.get(script.calls), (calls) => calls >= n, { every: "5 millis" })
      )

    /**
     * Waits until the loop, its run over, sleeps until the next one (a clock moved before that
     * would pass unseen by it).
     */
    const loopAsleep = Effect.gen(function* () {
      const next = (yield* Clock.currentTimeMillis) + 5_000
      yield* eventually("the refresh loop to wait for its next run", TestClock.sleeps(), (sleeps) =>
        Chunk.some(sleeps, (at) => at === next)
      )
    })

    it.scoped("runs at start-up and every interval, and survives failed and crashing runs", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(NOW)
        const script = yield* ScriptedPriceFeed
        yield* Ref.set(script.calls, 0)
        yield* Ref.set(script.behaviour, "fail")
        // Build the loop over the shared Market (this test's scope owns the fiber).
        yield* Layer.build(MarketRefreshLive)
        expect(yield* callsReach(2)).toBe(2) // first run, at once: both tokens fail
        yield* Ref.set(script.behaviour, "die")
        yield* loopAsleep
        yield* TestClock.adjust("5 seconds")
        expect(yield* callsReach(4)).toBe(4) // second run: a defect, logged
        yield* Ref.set(script.behaviour, "answer")
        yield* Ref.set(script.price, 77)
        yield* loopAsleep
        yield* TestClock.adjust("5 seconds")
        expect(yield* callsReach(6)).toBe(6) // the loop is still alive
        const market = yield* Market
        yield* Ref.set(script.behaviour, "hang") // a read would now hang: the value must come from the cache
        expect((yield* market.marketData("AAA")).tokenPrice).toBe(77)
        yield* TestClock.adjust("4 seconds")
        expect(yield* Ref.get(script.calls)).toBe(6) // nothing before the interval
      })
    )
  })
})
