import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { ChainDeployment } from "../../src/chain/Deployment.js"
import { setStockPaused } from "../../src/chain/DevnetOperator.js"
import { EvmChain } from "../../src/chain/EvmChain.js"
import { TokenRegistry } from "../../src/chain/Tokens.js"
import { marketStatusAt } from "../../src/market/Calendar.js"
import { send } from "../support/http.js"
import { TestDevnet, TestDevnetDeployment } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"

const EARLY_CLOSE = Date.parse("2026-11-27T18:00:00Z") // Fri 2026-11-27 13:00 ET
const NEXT_OPEN = Date.parse("2026-11-30T14:30:00Z") // Mon 2026-11-30 09:30 ET

// Readers always go to the feed (1 ms staleness), so on-chain changes show at once.
layer(testServer({ PRICE_MAX_STALENESS: "1" }), { excludeTestServices: true, timeout: "60 seconds" })(
  "GET /market/*",
  (it) => {
    it.effect("/market/status?at=ISO: the calendar's MarketStatus, nothing wrapped around it", () =>
      Effect.gen(function* () {
        const { body, status } = yield* send("GET", "/market/status?at=2026-11-27T17:59:00Z")
        expect(status).toBe(200)
        expect(body).toEqual({
          openState: true,
          marketStatus: "regular",
          reasonCode: "TRADING",
          nextOpenTime: NEXT_OPEN,
          nextCloseTime: EARLY_CLOSE
        })
      })
    )

    it.effect("/market/status?at=ms and with a zone offset give the same answer", () =>
      Effect.gen(function* () {
        const at = Date.parse("2026-11-27T17:59:00Z")
        const byMs = yield* send("GET", `/market/status?at=${at}`)
        expect(byMs.status).toBe(200)
        expect(byMs.body).toEqual(marketStatusAt(at))
        const byOffset = yield* send("GET", `/market/status?at=${encodeURIComponent("2026-11-27T12:59:00-05:00")}`)
        expect(byOffset.body).toEqual(marketStatusAt(at))
        // An unencoded "+" arrives as a space and is still read as "+".
        const plus = yield* send("GET", "/market/status?at=2026-11-27T18:59:00+01:00")
        expect(plus.body).toEqual(marketStatusAt(at))
        const closed = yield* send("GET", `/market/status?at=${EARLY_CLOSE + 4 * 3_600_000}`) // 17:00 ET
        expect(closed.body).toEqual({
          openState: false,
          marketStatus: "closed",
          reasonCode: "MARKET_CLOSED",
          nextOpenTime: NEXT_OPEN,
          nextCloseTime: Date.parse("2026-11-30T21:00:00Z")
        })
      })
    )

    it.effect("/market/status without at is now", () =>
      Effect.gen(function* () {
        const before = marketStatusAt(Date.now())
        const { body, status } = yield* send("GET", "/market/status")
        expect(status).toBe(200)
        expect(body.marketStatus).toBe(before.marketStatus)
        expect(body.nextOpenTime).toBe(before.nextOpenTime)
      })
    )

    it.effect("a bad at is 400 BAD_REQUEST naming at", () =>
      Effect.gen(function* () {
        for (const bad of [
          "yesterday",
          "2026-11-27T17:59:00",
          "2026-02-30T10:00:00Z",
          "2026-11-27",
          "-5",
          "1e12",
          ""
        ]) {
          const { body, status } = yield* send("GET", `/market/status?at=${encodeURIComponent(bad)}`)
          expect(status, bad).toBe(400)
          expect(body.code).toBe("BAD_REQUEST")
          expect(body.error).toBe(
            "at: must be an ISO-8601 date-time with a zone (2026-11-27T17:59:00Z) or milliseconds since epoch"
          )
        }
      })
    )

    it.effect("/market/tokens lists every registry token with its market data", () =>
      Effect.gen(function* () {
        const { stocks } = yield* ChainDeployment
        const { body, status } = yield* send("GET", "/market/tokens")
        expect(status).toBe(200)
        expect(body.map((t: { symbol: string }) => t.symbol)).toEqual(stocks.map((s) => s.symbol))
        const nvda = body[0]
        expect(nvda).toMatchObject({ symbol: "NVDA", address: stocks[0]!.address, ticker: "NVDA", platform: "devnet" })
        expect(Object.keys(nvda.market).sort()).toEqual(
          ["closeRef", "platform", "spreadVsClose", "status", "ticker", "tokenPrice"].sort()
        )
        expect(nvda.market.tokenPrice).toBeGreaterThan(0)
        expect(Object.keys(nvda.market.status).sort()).toEqual(
          ["marketStatus", "nextCloseTime", "nextOpenTime", "openState", "reasonCode"].sort()
        )
      })
    )

    it.effect("/market/tokens/{token} by symbol or address; a paused token is paused / ASSET_PAUSED", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const aapl = devnet.stocks.find((s) => s.symbol === "AAPL")!
        yield* setStockPaused(devnet, "AAPL", true)
        const paused = yield* send("GET", "/market/tokens/aapl")
        expect(paused.status).toBe(200)
        expect(paused.body.address).toBe(aapl.address)
        expect(paused.body.market.status).toMatchObject({
          openState: false,
          marketStatus: "paused",
          reasonCode: "ASSET_PAUSED"
        })
        yield* setStockPaused(devnet, "AAPL", false)
        const open = yield* send("GET", `/market/tokens/${aapl.address.toLowerCase()}`)
        expect(open.body.symbol).toBe("AAPL")
        expect(open.body.market.status.reasonCode).not.toBe("ASSET_PAUSED")
        const unknown = yield* send("GET", "/market/tokens/GME")
        expect(unknown.status).toBe(404)
        expect(unknown.body).toEqual({ error: "unknown token GME", code: "NOT_FOUND" })
      })
    )
  }
)

/** The devnet's chain, whose registry lists one more token whose "feed" is not a contract. */
const ChainWithBrokenFeed = Layer.merge(
  EvmChain,
  Layer.effect(
    TokenRegistry,
    Effect.gen(function* () {
      const deployment = yield* ChainDeployment
      const devnet = yield* TestDevnet
      const broken = { ...deployment.stocks[0]!, symbol: "BROKEN", ticker: "BROKEN", address: devnet.exchange }
      return { chainId: deployment.chainId, tokens: [...deployment.stocks, { ...broken, feed: devnet.usd1 }] }
    })
  )
).pipe(Layer.provideMerge(TestDevnetDeployment))

const serverWithBrokenFeed = testServer({ PRICE_READ_TIMEOUT: "1s" }, { chain: ChainWithBrokenFeed })

describe("a token whose price cannot be read", () => {
  layer(serverWithBrokenFeed, { excludeTestServices: true, timeout: "60 seconds" })("GET /market/tokens", (it) => {
    it.effect("is 502 PRICE_UNAVAILABLE on its own, and null in the list while the others answer", () =>
      Effect.gen(function* () {
        const one = yield* send("GET", "/market/tokens/BROKEN")
        expect(one.status).toBe(502)
        expect(one.body.code).toBe("PRICE_UNAVAILABLE")
        expect(one.body.error).toContain("BROKEN")
        const all = yield* send("GET", "/market/tokens")
        expect(all.status).toBe(200)
        const broken = all.body.find((t: { symbol: string }) => t.symbol === "BROKEN")
        expect(broken.market).toBeNull()
        expect(all.body.filter((t: { market: unknown }) => t.market !== null)).toHaveLength(5)
      })
    )
  })
})
