/**
 * The `PriceFeed` port: a token's USD price and its platform's trading state.
 *
 * The production and embedded implementation (`PriceFeed.onchain`) reads the token's Chainlink
 * AggregatorV3-compatible feed and its `paused()` flag through the `ChainClient` port. Another
 * price source (a platform's API, Data Streams, ...) is another Layer of this Tag.
 */
import { Context, Data, Effect, Either, Layer, Schema } from "effect"
import { formatUnits } from "viem"
import { ChainClient, type FeedState } from "../chain/ChainClient.js"
import type { StockToken } from "../chain/Tokens.js"

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
  readonly quote: (token: StockToken) => Effect.Effect<Quote, PriceFeedError>
  /** Every token's quote, or why it has none, in one go (one chain read for them all on chain). */
  readonly quotes: (
    tokens: ReadonlyArray<StockToken>
  ) => Effect.Effect<ReadonlyArray<Either.Either<Quote, PriceFeedError>>>
}

/** A feed answer (an integer with `decimals` decimals) as a USD number; none unless positive. */
export const feedPrice = (answer: bigint, decimals: number): number | undefined =>
  answer > 0n ? Number(formatUnits(answer, decimals)) : undefined

export class PriceFeed extends Context.Tag("app/PriceFeed")<PriceFeed, PriceFeedService>() {
  /**
   * Reads the tokens' feeds and their `paused()` flags (a token without one is open) in one
   * multicall: a refresh of every token costs one call, not two per token.
   */
  static readonly onchain = Layer.effect(
    PriceFeed,
    Effect.gen(function* () {
      const chain = yield* ChainClient
      const quoteOf = (token: StockToken, state: Either.Either<FeedState, string>) =>
        Either.flatMap(
          Either.mapLeft(state, (reason) => new PriceFeedError({ message: `${token.symbol} ${reason}` })),
          ({ round, paused }): Either.Either<Quote, PriceFeedError> => {
            const price = feedPrice(round.answer, round.decimals)
            return price === undefined || round.updatedAt === 0n
              ? Either.left(new PriceFeedError({ message: `${token.symbol}: the feed has no positive answer` }))
              : Either.right({
                  price,
                  updatedAt: Number(round.updatedAt) * 1000,
                  platformStatus: paused ? "paused" : "open"
                })
          }
        )
      const quotes = (tokens: ReadonlyArray<StockToken>) =>
        chain.feedStates(tokens.map(({ feed, address }) => ({ feed, token: address }))).pipe(
          Effect.map((states) => tokens.map((token, i) => quoteOf(token, states[i]!))),
          Effect.catchAll((error) =>
            Effect.succeed(
              tokens.map((token) =>
                Either.left(new PriceFeedError({ message: `${token.symbol} ${error.message}`, cause: error }))
              )
            )
          ),
          Effect.withSpan("PriceFeed.quotes", { attributes: { "market.tokens": tokens.length } })
        )
      const quote = (token: StockToken) =>
        Effect.flatMap(quotes([token]), ([quoted]) => quoted!).pipe(
          Effect.withSpan("PriceFeed.quote", { attributes: { "token.symbol": token.symbol } })
        )
      return PriceFeed.of({ quote, quotes })
    })
  )
}
