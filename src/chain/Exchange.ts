/**
 * The demo exchange's rules (contracts/DemoExchange.sol) as pure functions: its prices, its checks in
 * the contract's order and its revert reasons. The in-memory chain trades by them; a caller sizes a
 * trade and its minimum output by them. Stock tokens and USD1 have 18 decimals, feeds 8.
 */
import { Either } from "effect"

/** The exchange's revert reasons, word for word. */
export const ExchangeRevert = {
  paused: "DemoExchange: token is paused",
  unknownToken: "DemoExchange: unknown token",
  invalidPrice: "DemoExchange: invalid price",
  stalePrice: "DemoExchange: stale price",
  belowMinimum: "DemoExchange: output below minimum"
} as const

/** The exchange refuses a feed answer older than this (its `maxPriceAge`, one day). */
export const MAX_PRICE_AGE_SECONDS = 86_400n

const FEED_SCALE = 10n ** 8n

/** USD1 paid for `amount` of a stock token at the 8-decimal feed `answer` (the contract's `quote`). */
export const usd1ForTokens = (amount: bigint, answer: bigint): bigint => (amount * answer) / FEED_SCALE

/** Stock tokens bought with `usd1In` USD1 at the 8-decimal feed `answer` (the contract's `quoteBuy`). */
export const tokensForUsd1 = (usd1In: bigint, answer: bigint): bigint => (usd1In * FEED_SCALE) / answer

export interface ExchangeTrade {
  /** `sell`: stock tokens in, USD1 out; `buy`: USD1 in, stock tokens out. */
  readonly side: "sell" | "buy"
  readonly amountIn: bigint
  readonly minOut: bigint
}

export interface ExchangeMarket {
  readonly paused: boolean
  /** The token's feed round; none for a token the exchange does not know. */
  readonly round: { readonly answer: bigint; readonly updatedAt: bigint } | undefined
  /** Block time, seconds. */
  readonly now: bigint
}

/** The trade's output, or the exchange's revert reason, checked in the contract's order. */
export const exchangeOutput = (trade: ExchangeTrade, market: ExchangeMarket): Either.Either<bigint, string> => {
  if (market.paused) return Either.left(ExchangeRevert.paused)
  const round = market.round
  if (round === undefined) return Either.left(ExchangeRevert.unknownToken)
  if (round.answer <= 0n) return Either.left(ExchangeRevert.invalidPrice)
  if (round.updatedAt + MAX_PRICE_AGE_SECONDS < market.now) return Either.left(ExchangeRevert.stalePrice)
  const out =
    trade.side === "sell" ? usd1ForTokens(trade.amountIn, round.answer) : tokensForUsd1(trade.amountIn, round.answer)
  return out >= trade.minOut ? Either.right(out) : Either.left(ExchangeRevert.belowMinimum)
}
