/**
 * The `PriceFeed` port: a token's USD price and its platform's trading state.
 *
 * The production and embedded implementation (`PriceFeed.onchain`) reads a Chainlink
 * AggregatorV3-compatible feed (`latestRoundData` + `decimals`) and the token's `paused()` flag
 * through `ChainClient.publicClient`, with parallel reads (the devnet has no multicall contract).
 * Another price source (a platform's API, Data Streams, ...) is another Layer of this Tag.
 */
import { Context, Data, Effect, Layer, Schema } from "effect"
import { BaseError, ContractFunctionRevertedError, ContractFunctionZeroDataError, formatUnits } from "viem"
import type { Address } from "../chain/Address.js"
import { ChainClient, errorText, type StockToken } from "../chain/Chain.js"
import { PriceFeedArtifact, StockTokenArtifact } from "../chain/contracts/artifacts.js"

/** A token of the registry: a chain stock token plus the platform it trades on. */
export interface MarketToken extends StockToken {
  readonly platform: string
}

/** The platform's own trading state of a token. */
export type PlatformStatus = "open" | "paused"

/**
 * A platform status as a platform may report it: `pause` (Binance's spelling) and `paused` (Ondo's)
 * are synonyms and both decode to `paused`; any case is accepted.
 */
export const PlatformStatusInput = Schema.transform(
  Schema.String.pipe(
    Schema.filter((s) => ["open", "pause", "paused"].includes(s.toLowerCase()), {
      message: () => "must be open, pause or paused"
    })
  ),
  Schema.Literal("open", "paused"),
  {
    strict: true,
    decode: (s) => (s.toLowerCase() === "open" ? ("open" as const) : ("paused" as const)),
    encode: (s) => s
  }
)

export interface Quote {
  /** USD per whole token. */
  readonly price: number
  /** When the feed last updated the price (ms since epoch, the feed's own clock). */
  readonly updatedAt: number
  readonly platformStatus: PlatformStatus
}

export class PriceFeedError extends Data.TaggedError("PriceFeedError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface PriceFeedService {
  readonly quote: (token: MarketToken) => Effect.Effect<Quote, PriceFeedError>
}

/** A feed answer (an integer with `decimals` decimals) as a USD number; none unless positive. */
export const feedPrice = (answer: bigint, decimals: number): number | undefined =>
  answer > 0n ? Number(formatUnits(answer, decimals)) : undefined

/**
 * A call to a function the contract does not have reverts without any data (or, on an account
 * without code, returns nothing). For `paused()` that means "no pause flag", not a failed read.
 */
const isMissingFunction = (cause: unknown) =>
  cause instanceof BaseError &&
  cause.walk(
    (e) =>
      e instanceof ContractFunctionZeroDataError ||
      (e instanceof ContractFunctionRevertedError &&
        e.data === undefined &&
        e.signature === undefined &&
        (e.reason === undefined || e.reason === "execution reverted"))
  ) !== null

export class PriceFeed extends Context.Tag("app/PriceFeed")<PriceFeed, PriceFeedService>() {
  /**
   * Reads the token's Chainlink-style feed and its `paused()` flag in parallel. A token without a
   * `paused()` function is taken as open; any other failed read fails the quote.
   */
  static readonly onchain = Layer.effect(
    PriceFeed,
    Effect.gen(function* () {
      const { publicClient } = yield* ChainClient
      /** Feed decimals never change; read once per feed. */
      const feedDecimals = new Map<Address, number>()

      const read = <A>(token: MarketToken, what: string, f: () => Promise<A>) =>
        Effect.tryPromise({
          try: f,
          catch: (cause) => new PriceFeedError({ message: `${token.symbol} ${what}: ${errorText(cause)}`, cause })
        })

      const decimalsOf = (token: MarketToken) => {
        const known = feedDecimals.get(token.feed)
        if (known !== undefined) return Effect.succeed(known)
        return read(token, "decimals()", () =>
          publicClient.readContract({ address: token.feed, abi: PriceFeedArtifact.abi, functionName: "decimals" })
        ).pipe(Effect.tap((decimals) => Effect.sync(() => feedDecimals.set(token.feed, decimals))))
      }

      const pausedOf = (token: MarketToken) =>
        Effect.tryPromise({
          try: () =>
            publicClient.readContract({ address: token.address, abi: StockTokenArtifact.abi, functionName: "paused" }),
          catch: (cause) => cause
        }).pipe(
          Effect.catchAll((cause) =>
            isMissingFunction(cause)
              ? Effect.succeed(false)
              : Effect.fail(new PriceFeedError({ message: `${token.symbol} paused(): ${errorText(cause)}`, cause }))
          )
        )

      const quote = (token: MarketToken) =>
        Effect.gen(function* () {
          const [round, decimals, paused] = yield* Effect.all(
            [
              read(token, "latestRoundData()", () =>
                publicClient.readContract({
                  address: token.feed,
                  abi: PriceFeedArtifact.abi,
                  functionName: "latestRoundData"
                })
              ),
              decimalsOf(token),
              pausedOf(token)
            ],
            { concurrency: "unbounded" }
          )
          const [, answer, , updatedAt] = round
          const price = feedPrice(answer, decimals)
          if (price === undefined || updatedAt === 0n) {
            return yield* new PriceFeedError({ message: `${token.symbol}: the feed has no positive answer` })
          }
          return {
            price,
            updatedAt: Number(updatedAt) * 1000,
            platformStatus: paused ? "paused" : "open"
          } satisfies Quote
        }).pipe(Effect.withSpan("PriceFeed.quote", { attributes: { "token.symbol": token.symbol } }))

      return PriceFeed.of({ quote })
    })
  )
}
