import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Option, TestClock } from "effect"
import { createPublicClient, http } from "viem"
import { PriceFeedArtifact } from "../../src/chain/contracts/artifacts.js"
import { ChainDeployment } from "../../src/chain/Deployment.js"
import { setStockPaused, setStockPrice } from "../../src/chain/DevnetOperator.js"
import { marketStatusAt } from "../../src/market/Calendar.js"
import { Market } from "../../src/market/Market.js"
import { PriceFeed } from "../../src/market/PriceFeed.js"
import { TestChain, TestDevnet } from "../support/TestChain.js"
import { TestDatabase } from "../support/TestDatabase.js"

/** The market over the devnet's real feeds and pause flags (no fake), and a throwaway database. */
const MarketTest = Market.Default.pipe(
  Layer.provideMerge(PriceFeed.onchain),
  Layer.provideMerge(TestChain),
  Layer.provideMerge(TestDatabase)
)

const Z = (iso: string) => Date.parse(iso)
/** Fri 2026-11-20 10:00 ET: inside a regular session. */
const REGULAR = Z("2026-11-20T15:00:00Z")
/** Sat 2026-11-21 12:00 ET: closed for the weekend. */
const WEEKEND = Z("2026-11-21T17:00:00Z")

layer(MarketTest, { timeout: "60 seconds" })("Market over the devnet", (it) => {
  it.effect("the registry is the deployment's stock tokens, on platform devnet, found by symbol or address", () =>
    Effect.gen(function* () {
      const market = yield* Market
      const deployment = yield* ChainDeployment
      expect(market.tokens.map((t) => t.symbol)).toEqual(["NVDA", "TSLA", "AAPL", "MSFT", "SPY"])
      expect(market.tokens.every((t) => t.platform === "devnet")).toBe(true)
      const nvda = deployment.stocks[0]!
      expect(Option.getOrThrow(market.resolve("nvda")).address).toBe(nvda.address)
      expect(Option.getOrThrow(market.resolve(nvda.address.toLowerCase())).symbol).toBe("NVDA")
      expect(Option.isNone(market.resolve("GME"))).toBe(true)
      const error = yield* Effect.flip(market.marketData("GME"))
      expect(error._tag).toBe("NotFound")
    })
  )

  it.effect("tokenPrice is the feed's price and status the calendar's while the token is not paused", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(WEEKEND)
      const devnet = yield* TestDevnet
      const market = yield* Market
      yield* setStockPrice(devnet, "AAPL", 231.25)
      yield* market.refresh
      const data = yield* market.marketData("AAPL")
      expect(data.ticker).toBe("AAPL")
      expect(data.platform).toBe("devnet")
      expect(data.tokenPrice).toBe(231.25)
      expect(data.status).toEqual(marketStatusAt(WEEKEND))
      expect(data.status.marketStatus).toBe("closed")
      expect(data.status.reasonCode).toBe("WEEKEND")
    })
  )

  it.effect("a paused token is paused during regular hours; unpausing restores the calendar state", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(REGULAR)
      const devnet = yield* TestDevnet
      const market = yield* Market
      const calendar = marketStatusAt(REGULAR)
      expect(calendar.marketStatus).toBe("regular")

      yield* setStockPaused(devnet, "TSLA", true)
      yield* market.refresh
      const paused = yield* market.marketData("TSLA")
      expect(paused.status).toEqual({
        openState: false,
        marketStatus: "paused",
        reasonCode: "ASSET_PAUSED",
        nextOpenTime: calendar.nextOpenTime,
        nextCloseTime: calendar.nextCloseTime
      })
      // Only that token: the others follow the calendar.
      expect((yield* market.marketData("NVDA")).status).toEqual(calendar)

      yield* setStockPaused(devnet, "TSLA", false)
      yield* market.refresh
      expect((yield* market.marketData("TSLA")).status).toEqual(calendar)
    })
  )

  it.effect("a paused token is paused whatever the calendar says (weekend too)", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(WEEKEND)
      const devnet = yield* TestDevnet
      const market = yield* Market
      yield* setStockPaused(devnet, "MSFT", true)
      yield* market.refresh
      const status = (yield* market.marketData("MSFT")).status
      expect(status.marketStatus).toBe("paused")
      expect(status.reasonCode).toBe("ASSET_PAUSED")
      expect(status.openState).toBe(false)
      expect(status.nextOpenTime).toBe(marketStatusAt(WEEKEND).nextOpenTime)
      yield* setStockPaused(devnet, "MSFT", false)
    })
  )

  it.effect("the status follows the clock between refreshes (the cached price is reused)", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Z("2026-11-20T20:59:50Z")) // 15:59:50 ET
      const market = yield* Market
      yield* market.refresh
      expect((yield* market.marketData("SPY")).status.marketStatus).toBe("regular")
      yield* TestClock.adjust("20 seconds") // 16:00:10 ET, cache still fresh
      expect((yield* market.marketData("SPY")).status.marketStatus).toBe("postmarket")
    })
  )

  it.effect("a stale cache is read through: a new feed price shows without a refresh", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(WEEKEND)
      const devnet = yield* TestDevnet
      const market = yield* Market
      yield* setStockPrice(devnet, "NVDA", 150)
      yield* market.refresh
      yield* setStockPrice(devnet, "NVDA", 155.5)
      // Still fresh: the cached price.
      expect((yield* market.marketData("NVDA")).tokenPrice).toBe(150)
      yield* TestClock.adjust("31 seconds")
      expect((yield* market.marketData("NVDA")).tokenPrice).toBe(155.5)
    })
  )

  it.effect("allMarketData lists every token with its market data", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(WEEKEND)
      const market = yield* Market
      const all = yield* market.allMarketData
      expect(all.map((t) => t.symbol)).toEqual(["NVDA", "TSLA", "AAPL", "MSFT", "SPY"])
      for (const entry of all) {
        expect(entry.ticker).toBe(entry.symbol)
        expect(entry.platform).toBe("devnet")
        expect(entry.market?.tokenPrice).toBeGreaterThan(0)
        expect(entry.market?.ticker).toBe(entry.symbol)
      }
    })
  )

  it.effect("PriceFeed.onchain reads the feed's round and decimals and the token's paused() flag", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const feed = yield* PriceFeed
      const market = yield* Market
      const spy = market.tokens.find((t) => t.symbol === "SPY")!
      yield* setStockPrice(devnet, "SPY", 666.12345678)
      const quote = yield* feed.quote(spy)
      expect(quote.price).toBe(666.12345678)
      expect(quote.platformStatus).toBe("open")
      // The feed's own clock: the time of the block that set the price, in ms.
      const [, , , updatedAt] = yield* Effect.promise(() =>
        createPublicClient({ transport: http(devnet.rpcUrl) }).readContract({
          address: spy.feed,
          abi: PriceFeedArtifact.abi,
          functionName: "latestRoundData"
        })
      )
      expect(quote.updatedAt).toBe(Number(updatedAt) * 1000)
      yield* setStockPaused(devnet, "SPY", true)
      expect((yield* feed.quote(spy)).platformStatus).toBe("paused")
      yield* setStockPaused(devnet, "SPY", false)
      // A token contract without paused() trades; a feed that is not a feed fails the quote.
      expect((yield* feed.quote({ ...spy, address: devnet.usd1 })).platformStatus).toBe("open")
      const error = yield* Effect.flip(feed.quote({ ...spy, feed: devnet.usd1 }))
      expect(error._tag).toBe("PriceFeedError")
      expect(error.message).toContain("SPY latestRoundData()")
    })
  )

  it.effect("statusAt is the calendar alone", () =>
    Effect.gen(function* () {
      const market = yield* Market
      const at = Z("2026-11-27T17:59:00Z")
      expect(yield* market.statusAt(at)).toEqual(marketStatusAt(at))
      yield* TestClock.setTime(REGULAR)
      expect(yield* market.statusAt()).toEqual(marketStatusAt(REGULAR))
    })
  )
})
