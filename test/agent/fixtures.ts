/** Builders for decision inputs at fixed instants (statuses computed by the real calendar). */
import type { DecisionInput, TokenHolding } from "../../src/agent/Decide.js"
import type { Strategy } from "../../src/agent/Strategy.js"
import { type AdHocClosure, defaultAdHocClosures, etToUtc, marketStatusAt } from "../../src/market/Calendar.js"
import { tokenStatus } from "../../src/market/Market.js"

/** UTC ms of a New York wall-clock time. */
export const et = (date: string, time: string): number => etToUtc(date, time)

export interface TokenOptions {
  /** USD value held (balance = value / price). */
  readonly valueUsd?: number
  readonly price?: number
  /** spreadVsClose; null: no close reference. */
  readonly spread?: number | null
  readonly paused?: boolean
  readonly closures?: ReadonlyArray<AdHocClosure>
}

/** A token as the Market service would describe it at `at`. */
export const tokenAt = (symbol: string, at: number, options: TokenOptions = {}): TokenHolding => {
  const { closures = defaultAdHocClosures, paused = false, price = 100, spread = 0, valueUsd = 0 } = options
  return {
    symbol,
    balance: valueUsd / price,
    market: {
      status: tokenStatus(marketStatusAt(at, closures), paused ? "paused" : "open"),
      tokenPrice: price,
      closeRef: spread === null ? null : { price: price / (1 + spread), at: at - 3_600_000 },
      spreadVsClose: spread
    }
  }
}

export const strategy: Strategy = {
  targets: { NVDA: 0.5, TSLA: 0.5 },
  weeklySpendUsd: 70,
  timeZone: "America/New_York"
}

/**
 * A card issued at `at`, so every lookback day counts at weeklySpendUsd / 7 = $10 a day (strategy above):
 * the forecast is $10 per day of the window.
 */
export const inputAt = (at: number, overrides: Partial<DecisionInput> = {}): DecisionInput => ({
  at,
  strategy,
  cardUsd1: 100,
  walletUsd1: 0,
  tokens: [tokenAt("NVDA", at, { valueUsd: 520 }), tokenAt("TSLA", at, { valueUsd: 480 })],
  spending: { cardCreatedAt: at, payments: [] },
  ...overrides
})
