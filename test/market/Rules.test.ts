import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Either, FastCheck, Schema } from "effect"
import { ChainDeployment } from "../../src/chain/Deployment.js"
import { MAX_INSTANT, parseInstant } from "../../src/market/Api.js"
import { defaultAdHocClosures, marketStatusAt } from "../../src/market/Calendar.js"
import { marketSettings, spreadVsClose, tokenStatus } from "../../src/market/Market.js"
import { feedPrice, PlatformStatusInput } from "../../src/market/PriceFeed.js"
import { AppConfig } from "../../src/runtime/Config.js"

const REGULAR = Date.parse("2026-11-20T15:00:00Z")

describe("token status", () => {
  it("paused wins over every calendar state and keeps the calendar's next open/close", () => {
    for (const at of [REGULAR, Date.parse("2026-11-21T17:00:00Z"), Date.parse("2026-11-26T17:00:00Z")]) {
      const calendar = marketStatusAt(at)
      expect(tokenStatus(calendar, "paused")).toEqual({
        openState: false,
        marketStatus: "paused",
        reasonCode: "ASSET_PAUSED",
        nextOpenTime: calendar.nextOpenTime,
        nextCloseTime: calendar.nextCloseTime
      })
      expect(tokenStatus(calendar, "open")).toEqual(calendar)
    }
  })

  it("pause and paused are synonyms on input, in any case", () => {
    const decode = Schema.decodeUnknownSync(PlatformStatusInput)
    expect(decode("pause")).toBe("paused")
    expect(decode("paused")).toBe("paused")
    expect(decode("PAUSED")).toBe("paused")
    expect(decode("open")).toBe("open")
    expect(() => decode("halted")).toThrow(/open, pause or paused/)
    expect(tokenStatus(marketStatusAt(REGULAR), decode("pause")).marketStatus).toBe("paused")
  })

  it("spreadVsClose is tokenPrice / closeRef.price - 1, null without a reference", () => {
    expect(spreadVsClose(103.2, { price: 100, at: 0 })).toBeCloseTo(0.032, 12)
    expect(spreadVsClose(99, { price: 100, at: 0 })).toBeCloseTo(-0.01, 12)
    expect(spreadVsClose(99, null)).toBeNull()
  })

  it("feed answers are scaled by the feed's decimals; a non-positive answer is no price", () => {
    expect(feedPrice(18_112_345_678n, 8)).toBe(181.12345678)
    expect(feedPrice(1n, 0)).toBe(1)
    expect(feedPrice(0n, 8)).toBeUndefined()
    expect(feedPrice(-5n, 8)).toBeUndefined()
  })

  it.effect("STOCK_TOKENS: symbols upper-cased, platform 'onchain' unless given, decimals 18 unless given", () =>
    Effect.gen(function* () {
      const tokens = [
        { symbol: "nvdaon", address: `0x${"1".repeat(40)}`, feed: `0x${"2".repeat(40)}` },
        { symbol: "TSLAon", address: `0x${"3".repeat(40)}`, feed: `0x${"4".repeat(40)}`, platform: "ondo", decimals: 6 }
      ]
      const deployment = yield* ChainDeployment.pipe(
        Effect.provide(ChainDeployment.layer),
        Effect.provide(AppConfig.layer),
        Effect.withConfigProvider(
          ConfigProvider.fromMap(
            new Map([
              ["CHAIN_RPC_URL", "http://127.0.0.1:1"],
              ["CHAIN_ID", "56"],
              ["USD1_ADDRESS", `0x${"5".repeat(40)}`],
              ["RELAYER_PRIVATE_KEY", `0x${"6".repeat(64)}`],
              ["STOCK_TOKENS", JSON.stringify(tokens)]
            ])
          )
        ),
        Effect.scoped
      )
      expect(deployment.stocks.map((t) => [t.symbol, t.platform, t.decimals])).toEqual([
        ["NVDAON", "onchain", 18],
        ["TSLAON", "ondo", 6]
      ])
    })
  )
})

describe("the at parameter", () => {
  const Z = Date.parse
  it("accepts ms since epoch and ISO-8601 date-times with a zone", () => {
    expect(parseInstant("1795802340000")).toBe(1795802340000)
    expect(parseInstant("0")).toBe(0)
    expect(parseInstant("2026-11-27T17:59:00Z")).toBe(Z("2026-11-27T17:59:00Z"))
    expect(parseInstant("2026-11-27t17:59z")).toBe(Z("2026-11-27T17:59:00Z"))
    expect(parseInstant("2026-11-27T17:59:00.5Z")).toBe(Z("2026-11-27T17:59:00.500Z"))
    expect(parseInstant("2026-11-27T17:59:00.123456789Z")).toBe(Z("2026-11-27T17:59:00.123Z"))
    expect(parseInstant("2026-11-27T12:59:00-05:00")).toBe(Z("2026-11-27T17:59:00Z"))
    expect(parseInstant("2026-11-27T12:59:00-0500")).toBe(Z("2026-11-27T17:59:00Z"))
    expect(parseInstant("2026-11-27T18:59:00 01:00")).toBe(Z("2026-11-27T17:59:00Z"))
    expect(parseInstant("2028-02-29T00:00:00Z")).toBe(Z("2028-02-29T00:00:00Z"))
    expect(parseInstant("9999-12-31T23:59:59.999Z")).toBe(MAX_INSTANT)
  })

  it("refuses anything else", () => {
    for (const bad of [
      "",
      " ",
      "now",
      "-1",
      "1.5",
      "1e12",
      "0x10",
      String(MAX_INSTANT + 1),
      "2026-11-27",
      "2026-11-27T17:59:00",
      "2026-11-27 17:59:00Z",
      "2026-02-29T00:00:00Z",
      "2026-02-30T00:00:00Z",
      "2026-13-01T00:00:00Z",
      "2026-11-27T24:00:00Z",
      "2026-11-27T23:60:00Z",
      "2026-11-27T23:59:60Z",
      "2026-11-27T12:00:00+24:00",
      "1969-12-31T23:59:59Z",
      "1970-01-01T00:30:00+01:00",
      "Fri, 27 Nov 2026 17:59:00 GMT"
    ]) {
      expect(parseInstant(bad), bad).toBeUndefined()
    }
  })

  it.prop(
    "every instant 1970..9999 round-trips through its ISO form and its ms form",
    [FastCheck.integer({ min: 0, max: MAX_INSTANT })],
    ([ms]) => {
      expect(parseInstant(new Date(ms).toISOString())).toBe(ms)
      expect(parseInstant(String(ms))).toBe(ms)
    }
  )
})

describe("configuration", () => {
  const read = (env: Record<string, string>) =>
    Effect.runSync(
      Effect.either(Effect.withConfigProvider(marketSettings, ConfigProvider.fromMap(new Map(Object.entries(env)))))
    )

  it("defaults: 5 s refresh, 30 s staleness, 2 s read timeout, the built-in closures", () => {
    const settings = Either.getOrThrow(read({}))
    expect(Duration.toMillis(settings.refreshInterval)).toBe(5000)
    expect(Duration.toMillis(settings.maxStaleness)).toBe(30_000)
    expect(Duration.toMillis(settings.readTimeout)).toBe(2000)
    expect(settings.closures).toBe(defaultAdHocClosures)
  })

  it("durations as ms, short units or effect's form; nothing non-positive", () => {
    const settings = Either.getOrThrow(
      read({ PRICE_REFRESH_INTERVAL: "1500", PRICE_MAX_STALENESS: "1m", PRICE_READ_TIMEOUT: "750 millis" })
    )
    expect(Duration.toMillis(settings.refreshInterval)).toBe(1500)
    expect(Duration.toMillis(settings.maxStaleness)).toBe(60_000)
    expect(Duration.toMillis(settings.readTimeout)).toBe(750)
    for (const bad of ["0", "-1s", "soon", "5 parsecs", "Infinity"]) {
      const result = read({ PRICE_READ_TIMEOUT: bad })
      expect(Either.isLeft(result), bad).toBe(true)
      if (Either.isLeft(result)) expect(String(result.left)).toContain("PRICE_READ_TIMEOUT")
    }
  })

  it("MARKET_CLOSURES adds full closures to the calendar", () => {
    const settings = Either.getOrThrow(read({ MARKET_CLOSURES: "2026-12-01=National Day of Mourning, 2026-12-02" }))
    expect(settings.closures.slice(defaultAdHocClosures.length)).toEqual([
      { date: "2026-12-01", name: "National Day of Mourning" },
      { date: "2026-12-02", name: "Configured closure" }
    ])
    const tuesdayNoon = Date.parse("2026-12-01T17:00:00Z")
    expect(marketStatusAt(tuesdayNoon).marketStatus).toBe("regular")
    expect(marketStatusAt(tuesdayNoon, settings.closures)).toMatchObject({
      marketStatus: "closed",
      reasonCode: "HOLIDAY",
      nextOpenTime: Date.parse("2026-12-03T14:30:00Z")
    })
    const bad = read({ MARKET_CLOSURES: "2026-12-01,tomorrow" })
    expect(Either.isLeft(bad)).toBe(true)
  })
})
