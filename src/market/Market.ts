/**
 * Market data per stock token: the US calendar combined with the token's platform state, the
 * token's price, and the close reference it is compared with.
 *
 * - Prices come from the `PriceFeed` port. `MarketRefreshLive` refreshes every token on a schedule
 *   into an in-process cache; a reader uses the cache while it is fresher than
 *   `PRICE_MAX_STALENESS`, otherwise reads the feed itself, never waiting longer than
 *   `PRICE_READ_TIMEOUT`, and fails with `PriceUnavailable` when neither gives a price.
 * - The close reference is the last price observed while the token was in the regular session; it
 *   is stored in PostgreSQL (shared by replicas, kept across restarts) and only ever moves to a
 *   newer observation, so it freezes at the close.
 * - "Now" is effect's `Clock`.
 *
 * Rules and configuration are documented in docs/market.md.
 */
import { Clock, Config, ConfigError, Duration, Effect, Either, Option, Ref } from "effect"
import type { Address } from "../chain/Address.js"
import { ChainError } from "../chain/ChainClient.js"
import { type StockToken, TokenRegistry } from "../chain/Tokens.js"
import { NotFound } from "../http/ApiError.js"
import { backgroundLoop } from "../lifecycle/BackgroundLoop.js"
import { reportUnavailable } from "../observability/Outages.js"
import { traced } from "../observability/Traced.js"
import { durationConfig } from "../runtime/Config.js"
import type { CloseRef, MarketData, TokenMarket } from "./Api.js"
import { PriceUnavailable } from "./Api.js"
import { type AdHocClosure, defaultAdHocClosures, isIsoDate, type MarketStatus, marketStatusAt } from "./Calendar.js"
import { type CloseRefRow, MarketRepo } from "./MarketRepo.js"
import { type PlatformStatus, PriceFeed, type Quote } from "./PriceFeed.js"

// ---------------------------------------------------------------------------------------------------
// Pure rules

/**
 * A token's status: the calendar's, unless the token's platform reports it paused. A paused token
 * is `paused` / `ASSET_PAUSED` / not open whatever the calendar says; the calendar's next open and
 * close are kept.
 */
export const tokenStatus = (calendar: MarketStatus, platform: PlatformStatus): MarketStatus =>
  platform === "paused"
    ? { ...calendar, openState: false, marketStatus: "paused", reasonCode: "ASSET_PAUSED" }
    : calendar

/** `tokenPrice / closeRef.price - 1`; null without a close reference. */
export const spreadVsClose = (tokenPrice: number, closeRef: CloseRef | null): number | null =>
  closeRef === null ? null : tokenPrice / closeRef.price - 1

const marketDataOf = (
  token: StockToken,
  quote: Quote,
  closeRef: CloseRef | null,
  status: MarketStatus
): MarketData => ({
  ticker: token.ticker,
  platform: token.platform,
  status,
  tokenPrice: quote.price,
  closeRef,
  spreadVsClose: spreadVsClose(quote.price, closeRef)
})

// ---------------------------------------------------------------------------------------------------
// Configuration

export interface MarketSettings {
  /** PRICE_REFRESH_INTERVAL, default 5 s: pause between two scheduled refreshes. */
  readonly refreshInterval: Duration.Duration
  /** PRICE_MAX_STALENESS, default 30 s: how old a cached price may be and still be served. */
  readonly maxStaleness: Duration.Duration
  /** PRICE_READ_TIMEOUT, default 2 s: the longest a feed read may take. */
  readonly readTimeout: Duration.Duration
  /** The calendar's ad-hoc closure table: the built-in one plus MARKET_CLOSURES. */
  readonly closures: ReadonlyArray<AdHocClosure>
}

/** MARKET_CLOSURES: extra full closures as comma-separated ET dates, `YYYY-MM-DD[=name]`. */
const closuresConfig = Config.string("MARKET_CLOSURES").pipe(
  Config.mapOrFail((text) => {
    const entries = text
      .split(",")
      .map((part) => part.trim())
      .filter((part) => part.length > 0)
      .map((part) => {
        const [date = "", ...name] = part.split("=")
        return { date: date.trim(), name: name.join("=").trim() || "Configured closure" }
      })
    const bad = entries.filter((entry) => !isIsoDate(entry.date))
    return bad.length > 0
      ? Either.left(
          ConfigError.InvalidData(
            ["MARKET_CLOSURES"],
            `Expected MARKET_CLOSURES to be comma-separated YYYY-MM-DD[=name] dates, got "${bad[0]!.date}"`
          )
        )
      : Either.right(entries as ReadonlyArray<AdHocClosure>)
  }),
  Config.withDefault([] as ReadonlyArray<AdHocClosure>),
  // One table for the service's life: the calendar memoises holidays per table identity.
  Config.map((extra) => (extra.length === 0 ? defaultAdHocClosures : [...defaultAdHocClosures, ...extra]))
)

export const marketSettings: Config.Config<MarketSettings> = Config.all({
  refreshInterval: durationConfig("PRICE_REFRESH_INTERVAL", "5 seconds"),
  maxStaleness: durationConfig("PRICE_MAX_STALENESS", "30 seconds"),
  readTimeout: durationConfig("PRICE_READ_TIMEOUT", "2 seconds"),
  closures: closuresConfig
})

// ---------------------------------------------------------------------------------------------------
// Service

/** A price as read from the feed, and when we read it (our clock). */
export interface Observation {
  readonly quote: Quote
  readonly observedAt: number
}

export interface RefreshResult {
  readonly at: number
  /** Symbols whose price was read. */
  readonly refreshed: ReadonlyArray<string>
  /** Symbols whose feed failed or timed out. */
  readonly failed: ReadonlyArray<string>
  /** Symbols whose close reference was recorded (they were in the regular session). */
  readonly recorded: ReadonlyArray<string>
}

export class Market extends Effect.Service<Market>()("app/Market", {
  effect: Effect.gen(function* () {
    const { chainId, tokens } = yield* TokenRegistry
    const feed = yield* PriceFeed
    const repo = yield* MarketRepo
    const settings = yield* marketSettings
    const bySymbol = new Map(tokens.map((t) => [t.symbol.toUpperCase(), t]))
    const byAddress = new Map(tokens.map((t) => [t.address.toLowerCase(), t]))
    if (bySymbol.size !== tokens.length || byAddress.size !== tokens.length) {
      return yield* Effect.dieMessage("the stock token registry has a duplicate symbol or address")
    }

    const maxStalenessMs = Duration.toMillis(settings.maxStaleness)
    const cache = yield* Ref.make<ReadonlyMap<Address, Observation>>(new Map())
    const closeRefs = yield* Ref.make<ReadonlyMap<Address, CloseRef>>(new Map())
    /** One feed read per token at a time: concurrent readers of a stale token share it. */
    const locks = new Map(tokens.map((t) => [t.address, Effect.unsafeMakeSemaphore(1)]))

    const calendarAt = (at: number) => marketStatusAt(at, settings.closures)

    /** Keeps, per token, the newer of the stored and the given close references. */
    const mergeCloseRefs = (rows: ReadonlyArray<{ readonly token: Address; readonly ref: CloseRef }>) =>
      Ref.update(closeRefs, (current) => {
        const next = new Map(current)
        for (const { ref, token } of rows) {
          const known = next.get(token)
          if (known === undefined || ref.at > known.at) next.set(token, ref)
        }
        return next
      })

    const loadCloseRefs = repo
      .all(chainId)
      .pipe(
        Effect.flatMap((rows) =>
          mergeCloseRefs(
            rows.map((row) => ({ token: row.token, ref: { price: row.price, at: row.observedAt.getTime() } }))
          )
        )
      )
    yield* loadCloseRefs

    /** The latest read wins. */
    const store = (observations: ReadonlyArray<readonly [StockToken, Observation]>) =>
      Ref.update(cache, (current) => {
        const next = new Map(current)
        for (const [token, observation] of observations) next.set(token.address, observation)
        return next
      })

    /** Records the observations made while their token was in the regular session. */
    const recordCloseRefs = (observations: ReadonlyArray<readonly [StockToken, Observation]>) =>
      Effect.gen(function* () {
        const rows: Array<CloseRefRow> = observations
          .filter(
            ([, { observedAt, quote }]) =>
              tokenStatus(calendarAt(observedAt), quote.platformStatus).marketStatus === "regular"
          )
          .map(([token, { observedAt, quote }]) => ({
            token: token.address,
            symbol: token.symbol,
            price: quote.price,
            observedAt: new Date(observedAt),
            feedUpdatedAt: new Date(quote.updatedAt)
          }))
        yield* repo.record(chainId, rows)
        yield* mergeCloseRefs(
          rows.map((row) => ({ token: row.token, ref: { price: row.price, at: row.observedAt.getTime() } }))
        )
        return rows.map((row) => row.symbol)
      })

    const freshObservation = (token: StockToken) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const cached = (yield* Ref.get(cache)).get(token.address)
        // An observation "from the future" (the clock was set back) is not trusted either.
        return cached !== undefined && now >= cached.observedAt && now - cached.observedAt <= maxStalenessMs
          ? Option.some(cached)
          : Option.none<Observation>()
      })

    const unavailable = (token: StockToken, why: string) =>
      new PriceUnavailable({ error: `no current price for ${token.symbol}: ${why}` })

    /** The cached observation if fresh enough, else one read from the feed within the read timeout. */
    const observation = (token: StockToken) =>
      Effect.gen(function* () {
        const cached = yield* freshObservation(token)
        if (Option.isSome(cached)) return cached.value
        const read = yield* Effect.gen(function* () {
          // Another reader may have refreshed it while this one waited for the lock.
          const again = yield* freshObservation(token)
          if (Option.isSome(again)) return { observed: again.value, fromFeed: false }
          const quote = yield* feed.quote(token)
          const observed: Observation = { quote, observedAt: yield* Clock.currentTimeMillis }
          yield* store([[token, observed]])
          return { observed, fromFeed: true }
        }).pipe(
          locks.get(token.address)!.withPermits(1),
          // A feed that resists interruption is left to finish in the background: the reader goes.
          Effect.disconnect,
          Effect.timeoutFail({
            duration: settings.readTimeout,
            onTimeout: () =>
              unavailable(token, `the price feed did not answer within ${Duration.format(settings.readTimeout)}`)
          }),
          Effect.catchTag("PriceFeedError", (error) =>
            Effect.zipRight(
              // a feed on a chain that does not answer is that outage, counted once (Outages.ts)
              error.cause instanceof ChainError
                ? reportUnavailable("chain", `price feed: ${error.message}`, "request")
                : Effect.logWarning("price feed read failed").pipe(
                    Effect.annotateLogs({ symbol: token.symbol, reason: error.message })
                  ),
              Effect.fail(unavailable(token, "the price feed failed"))
            )
          )
        )
        if (read.fromFeed) yield* recordCloseRefs([[token, read.observed]])
        return read.observed
      })

    const resolve = (symbolOrAddress: string): Option.Option<StockToken> =>
      Option.fromNullable(bySymbol.get(symbolOrAddress.toUpperCase()) ?? byAddress.get(symbolOrAddress.toLowerCase()))

    /** The token's price and close reference now, with its status at `at` (default now). */
    const dataOf = (token: StockToken, at?: number) =>
      Effect.gen(function* () {
        const { quote } = yield* observation(token)
        const instant = at ?? (yield* Clock.currentTimeMillis)
        const closeRef = (yield* Ref.get(closeRefs)).get(token.address) ?? null
        return marketDataOf(token, quote, closeRef, tokenStatus(calendarAt(instant), quote.platformStatus))
      })

    const tokenMarketOf = (token: StockToken, market: MarketData | null): TokenMarket => ({
      symbol: token.symbol,
      address: token.address,
      ticker: token.ticker,
      platform: token.platform,
      market
    })

    const find = (symbolOrAddress: string) =>
      Option.match(resolve(symbolOrAddress), {
        onNone: () => Effect.fail(new NotFound({ error: `unknown token ${symbolOrAddress}` })),
        onSome: Effect.succeed
      })

    /**
     * Market data of one token, by symbol (any case) or address (any case): its price and close
     * reference now, its status at `at` (default now; the agent's preview looks ahead).
     */
    const marketData = traced("Market.marketData")(function* (symbolOrAddress: string, at?: number) {
      const token = yield* find(symbolOrAddress)
      yield* Effect.annotateCurrentSpan("token.symbol", token.symbol)
      return yield* dataOf(token, at)
    })

    /** One token with its market data, as `GET /market/tokens/{token}` answers it. */
    const tokenMarket = traced("Market.tokenMarket")(function* (symbolOrAddress: string) {
      const token = yield* find(symbolOrAddress)
      yield* Effect.annotateCurrentSpan("token.symbol", token.symbol)
      return tokenMarketOf(token, yield* dataOf(token))
    })

    /** Every token with its market data; `market` is null for a token whose price is unavailable. */
    const allMarketData = Effect.forEach(
      tokens,
      (token) =>
        dataOf(token).pipe(
          Effect.map((market) => tokenMarketOf(token, market)),
          Effect.catchTag("PriceUnavailable", () => Effect.succeed(tokenMarketOf(token, null)))
        ),
      { concurrency: "unbounded" }
    ).pipe(Effect.withSpan("Market.allMarketData"))

    /** The calendar's MarketStatus at `at` (default now), without any token state. */
    const statusAt = traced("Market.statusAt")(function* (at?: number) {
      return calendarAt(at ?? (yield* Clock.currentTimeMillis))
    })

    /**
     * Reads every token's feed (each within the read timeout) into the cache, records close
     * references for tokens in the regular session and picks up those other replicas recorded.
     * Fails with `PriceUnavailable` only when no feed answered at all.
     */
    const refresh: Effect.Effect<RefreshResult, PriceUnavailable> = Effect.gen(function* () {
      // Every token in one read of the feed (one multicall on chain), bounded as a whole.
      const quoted = yield* feed.quotes(tokens).pipe(Effect.disconnect, Effect.timeoutOption(settings.readTimeout))
      const results = tokens.map((token, i) => {
        const quote = Option.match(quoted, {
          onNone: () =>
            Either.left({
              message: `${token.symbol}: no answer within ${Duration.format(settings.readTimeout)}`
            }),
          onSome: (quotes) => quotes[i]!
        })
        const result = Either.mapLeft(quote, (error) => ({
          reason: error.message,
          chainDown: "cause" in error && error.cause instanceof ChainError
        }))
        return [token, result] as const
      })
      const now = yield* Clock.currentTimeMillis
      const observed = results.flatMap(([token, result]) =>
        Either.isRight(result) ? [[token, { quote: result.right, observedAt: now }] as const] : []
      )
      const failed = results.flatMap(([token, result]) =>
        Either.isLeft(result) ? [[token, result.left] as const] : []
      )
      yield* store(observed)
      const recorded = yield* recordCloseRefs(observed)
      yield* loadCloseRefs
      yield* Effect.annotateCurrentSpan({ "market.refreshed": observed.length, "market.failed": failed.length })
      // Feeds on a chain that does not answer are that outage, counted once per refresh (Outages.ts).
      const chainDown = failed.filter(([, failure]) => failure.chainDown)
      if (chainDown.length > 0) {
        yield* reportUnavailable("chain", `price refresh: ${chainDown[0]![1].reason}`, "job")
      }
      const otherwise = failed.filter(([, failure]) => !failure.chainDown)
      if (otherwise.length > 0) {
        yield* Effect.logWarning("price refresh: some feeds failed").pipe(
          Effect.annotateLogs({
            failed: otherwise.map(([token, failure]) => `${token.symbol} (${failure.reason})`).join("; ")
          })
        )
      }
      if (observed.length === 0 && tokens.length > 0) {
        return yield* new PriceUnavailable({ error: "no price feed answered" })
      }
      return {
        at: now,
        refreshed: observed.map(([token]) => token.symbol),
        failed: failed.map(([token]) => token.symbol),
        recorded
      } satisfies RefreshResult
    }).pipe(Effect.withSpan("Market.refresh"))

    return {
      settings,
      /** The token registry. */
      tokens,
      /** A token by symbol (any case) or address (any case). */
      resolve,
      marketData,
      tokenMarket,
      allMarketData,
      statusAt,
      refresh
    }
  }),
  dependencies: [MarketRepo.Default]
}) {}

/**
 * Refreshes prices every PRICE_REFRESH_INTERVAL, the first time at start-up. A refresh where no feed
 * answered was already logged (or counted in the chain's outage) by `refresh`.
 */
export const MarketRefreshLive = backgroundLoop(
  "market-refresh",
  Effect.map(Market, (market) => ({
    tick: market.refresh.pipe(Effect.catchTag("PriceUnavailable", () => Effect.void)),
    every: market.settings.refreshInterval
  }))
)
