import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer, TestClock } from "effect"
import { ChainDeployment } from "../../src/chain/Deployment.js"
import { setStockPaused, setStockPrice } from "../../src/chain/DevnetOperator.js"
import { Market } from "../../src/market/Market.js"
import { MarketRepo } from "../../src/market/MarketRepo.js"
import { PriceFeed } from "../../src/market/PriceFeed.js"
import { TestChain, TestDevnet } from "../support/TestChain.js"
import { TestDatabase } from "../support/TestDatabase.js"

/**
 * Everything but the Market itself, which each test builds (and rebuilds, as a restart or a second
 * replica would) over the same devnet and database.
 */
const Base = Layer.mergeAll(PriceFeed.onchain, MarketRepo.Default).pipe(
  Layer.provideMerge(TestChain),
  Layer.provideMerge(TestDatabase)
)

/** Runs `f` against a freshly built Market service, released at the end (a process lifetime). */
const withMarket = <A, E, R>(f: (market: Market) => Effect.Effect<A, E, R>) =>
  Effect.scoped(Effect.flatMap(Market, f).pipe(Effect.provide(Market.DefaultWithoutDependencies)))

const Z = (iso: string) => Date.parse(iso)
// Times move forward through the file: every test continues the same market history.
const SAT_BEFORE = Z("2026-11-14T17:00:00Z") // Sat 12:00 ET
const MON_PREMARKET = Z("2026-11-16T13:00:00Z") // Mon 08:00 ET
const MON_REGULAR = Z("2026-11-16T20:30:00Z") // Mon 15:30 ET
const MON_LAST_MINUTE = Z("2026-11-16T20:59:30Z") // Mon 15:59:30 ET
const MON_POSTMARKET = Z("2026-11-16T21:30:00Z") // Mon 16:30 ET
const TUE_OVERNIGHT = Z("2026-11-17T07:00:00Z") // Tue 02:00 ET
const SAT_AFTER = Z("2026-11-21T17:00:00Z") // Sat 12:00 ET

const closeRefRows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ symbol: string; price: number }>`SELECT symbol, price FROM close_refs ORDER BY symbol`
).pipe(Effect.orDie)

layer(Base, { timeout: "60 seconds" })("closeRef", (it) => {
  it.effect("is null (and spreadVsClose too) before a regular session has been seen", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      yield* setStockPrice(devnet, "NVDA", 180)
      yield* TestClock.setTime(SAT_BEFORE)
      yield* withMarket((market) =>
        Effect.gen(function* () {
          yield* market.refresh
          yield* TestClock.setTime(MON_PREMARKET)
          yield* market.refresh
          const data = yield* market.marketData("NVDA")
          expect(data.tokenPrice).toBe(180)
          expect(data.closeRef).toBeNull()
          expect(data.spreadVsClose).toBeNull()
        })
      )
      expect(yield* closeRefRows).toEqual([])
    })
  )

  it.effect("follows the price during the regular session and freezes at the close", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      yield* withMarket((market) =>
        Effect.gen(function* () {
          yield* TestClock.setTime(MON_REGULAR)
          const first = yield* market.refresh
          expect(first.recorded).toEqual(["NVDA", "TSLA", "AAPL", "MSFT", "SPY"])
          expect(yield* market.marketData("NVDA")).toMatchObject({
            tokenPrice: 180,
            closeRef: { price: 180, at: MON_REGULAR },
            spreadVsClose: 0
          })

          yield* setStockPrice(devnet, "NVDA", 182)
          yield* TestClock.setTime(MON_LAST_MINUTE)
          yield* market.refresh
          expect((yield* market.marketData("NVDA")).closeRef).toEqual({ price: 182, at: MON_LAST_MINUTE })

          // After the close: a new price moves tokenPrice and the spread, not the reference.
          yield* setStockPrice(devnet, "NVDA", 191.1)
          yield* TestClock.setTime(MON_POSTMARKET)
          const after = yield* market.refresh
          expect(after.recorded).toEqual([])
          const data = yield* market.marketData("NVDA")
          expect(data.tokenPrice).toBe(191.1)
          expect(data.closeRef).toEqual({ price: 182, at: MON_LAST_MINUTE })
          expect(data.spreadVsClose).toBeCloseTo(191.1 / 182 - 1, 12)

          // Overnight too (a read-through outside the regular session records nothing either).
          yield* setStockPrice(devnet, "NVDA", 170)
          yield* TestClock.setTime(TUE_OVERNIGHT)
          const overnight = yield* market.marketData("NVDA")
          expect(overnight.status.marketStatus).toBe("overnight")
          expect(overnight.tokenPrice).toBe(170)
          expect(overnight.closeRef).toEqual({ price: 182, at: MON_LAST_MINUTE })
          expect(overnight.spreadVsClose).toBeCloseTo(170 / 182 - 1, 12)
        })
      )
    })
  )

  it.effect("survives a restart: a new service over the same database has it before any regular session", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(SAT_AFTER)
      yield* withMarket((market) =>
        Effect.gen(function* () {
          const data = yield* market.marketData("NVDA")
          expect(data.status.marketStatus).toBe("closed")
          expect(data.tokenPrice).toBe(170)
          expect(data.closeRef).toEqual({ price: 182, at: MON_LAST_MINUTE })
          expect(data.spreadVsClose).toBeCloseTo(170 / 182 - 1, 12)
        })
      )
      const rows = yield* closeRefRows
      expect(rows.find((row) => row.symbol === "NVDA")?.price).toBe(182)
    })
  )

  it.effect("a token paused during the regular session does not move its reference", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const regular = Z("2026-11-23T15:00:00Z") // Mon 10:00 ET
      yield* setStockPaused(devnet, "NVDA", true)
      yield* setStockPrice(devnet, "NVDA", 120)
      yield* TestClock.setTime(regular)
      yield* withMarket((market) =>
        Effect.gen(function* () {
          const result = yield* market.refresh
          expect(result.recorded).not.toContain("NVDA")
          expect(result.recorded).toContain("TSLA")
          const data = yield* market.marketData("NVDA")
          expect(data.status.marketStatus).toBe("paused")
          expect(data.closeRef).toEqual({ price: 182, at: MON_LAST_MINUTE })
        })
      )
      yield* setStockPaused(devnet, "NVDA", false)
    })
  )

  it.effect("replicas share it: a reference only moves to a newer observation, whoever writes it", () =>
    Effect.gen(function* () {
      const repo = yield* MarketRepo
      const { chainId, stocks } = yield* ChainDeployment
      const spy = stocks.find((s) => s.symbol === "SPY")!
      const t1 = Z("2026-11-24T20:00:00Z")
      const t2 = Z("2026-11-24T20:30:00Z")
      const row = (price: number, at: number) => ({
        token: spy.address,
        symbol: "SPY",
        price,
        observedAt: new Date(at),
        feedUpdatedAt: new Date(at)
      })
      yield* TestClock.setTime(Z("2026-11-25T03:00:00Z")) // Tue 22:00 ET, overnight
      yield* withMarket((replicaA) =>
        withMarket((replicaB) =>
          Effect.gen(function* () {
            // Replica B records a newer reference; A sees it at its next refresh.
            yield* repo.record(chainId, [row(700, t2)])
            yield* replicaA.refresh
            expect((yield* replicaA.marketData("SPY")).closeRef).toEqual({ price: 700, at: t2 })
            // A late writer with an older observation changes nothing.
            yield* repo.record(chainId, [row(650, t1)])
            yield* replicaB.refresh
            expect((yield* replicaB.marketData("SPY")).closeRef).toEqual({ price: 700, at: t2 })
            expect((yield* closeRefRows).find((r) => r.symbol === "SPY")?.price).toBe(700)
          })
        )
      )
    })
  )
})
