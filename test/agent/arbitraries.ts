/** Random decision inputs for the property tests. */
import { FastCheck } from "effect"
import type { CardCommitments, DecisionInput, TokenHolding } from "../../src/agent/Decide.js"
import {
  type MarketStatus,
  marketStatusAt,
  type SessionInterval,
  sessionsFor,
  tradingDay
} from "../../src/market/Calendar.js"
import { tokenStatus } from "../../src/market/Market.js"

const DAY = 86_400_000
const FIRST = Date.parse("2026-01-01T00:00:00Z")
const LAST = Date.parse("2028-12-31T00:00:00Z")
const SYMBOLS = ["AAA", "BBB", "CCC", "DDD", "EEE"] as const
const ZONES = ["America/New_York", "Europe/Paris", "Asia/Kolkata", "America/Santiago", "Pacific/Auckland", "UTC"]

export const usd = (maxDollars: number) =>
  FastCheck.integer({ min: 0, max: maxDollars * 100 }).map((cents) => cents / 100)

/** Any instant, or one in the hour before a regular close (close windows and early closes are rare otherwise). */
export const instant = FastCheck.oneof(
  FastCheck.integer({ min: FIRST, max: LAST }),
  FastCheck.tuple(
    FastCheck.integer({ min: 0, max: (LAST - FIRST) / DAY }),
    FastCheck.integer({ min: 0, max: 3_600_000 })
  ).map(([day, before]) => {
    const date = new Date(FIRST + day * DAY).toISOString().slice(0, 10)
    return (tradingDay(date)?.close ?? FIRST + day * DAY) - before
  })
)

/** Statuses as the Market service gives them at `at`, and arbitrary ones (platform states, nonsense). */
const statusAt = (at: number): FastCheck.Arbitrary<MarketStatus> =>
  FastCheck.oneof(
    FastCheck.constantFrom("open" as const, "paused" as const).map((platform) =>
      tokenStatus(marketStatusAt(at), platform)
    ),
    FastCheck.record({
      openState: FastCheck.boolean(),
      marketStatus: FastCheck.constantFrom<MarketStatus["marketStatus"]>(
        "premarket",
        "regular",
        "postmarket",
        "overnight",
        "closed",
        "offhours",
        "pause",
        "paused",
        null
      ),
      reasonCode: FastCheck.constantFrom("TRADING", "MARKET_CLOSED", "HOLIDAY", "ASSET_PAUSED", "ASSET_LIMITED", null),
      nextOpenTime: FastCheck.constant(null),
      nextCloseTime: FastCheck.constant(null)
    })
  )

const tokenAt = (at: number, symbol: string): FastCheck.Arbitrary<TokenHolding> =>
  FastCheck.record({
    value: FastCheck.oneof(FastCheck.constant(0), usd(3000), usd(3000)),
    price: FastCheck.integer({ min: 1, max: 200_000 }).map((cents) => cents / 100),
    spread: FastCheck.option(
      FastCheck.integer({ min: -300, max: 300 }).map((bp) => bp / 10_000),
      { nil: null }
    ),
    status: statusAt(at),
    priced: FastCheck.integer({ min: 0, max: 9 }).map((n) => n > 0)
  }).map(({ price, priced, spread, status, value }) => ({
    symbol,
    balance: value / price,
    market: priced
      ? {
          status,
          tokenPrice: price,
          closeRef: spread === null ? null : { price: price / (1 + spread), at: at - DAY },
          spreadVsClose: spread
        }
      : null
  }))

export interface InputKnobs {
  readonly at?: FastCheck.Arbitrary<number>
  readonly cardUsd1?: FastCheck.Arbitrary<number>
  readonly walletUsd1?: FastCheck.Arbitrary<number>
}

/** Any decision input; the knobs narrow the instant and the balances. */
export const decisionInput = (knobs: InputKnobs = {}): FastCheck.Arbitrary<DecisionInput> =>
  (knobs.at ?? instant).chain((at) =>
    FastCheck.record({
      at: FastCheck.constant(at),
      tokens: FastCheck.subarray([...SYMBOLS], { minLength: 0 }).chain((symbols) =>
        FastCheck.tuple(...symbols.map((symbol) => tokenAt(at, symbol)))
      ),
      targets: FastCheck.subarray([...SYMBOLS], { minLength: 1 }).chain((symbols) =>
        FastCheck.tuple(...symbols.map(() => FastCheck.integer({ min: 1, max: 100 }))).map((weights) => {
          const sum = weights.reduce((a, b) => a + b, 0)
          return Object.fromEntries(symbols.map((symbol, i) => [symbol, weights[i]! / sum]))
        })
      ),
      weeklySpendUsd: usd(2000),
      timeZone: FastCheck.constantFrom(...ZONES),
      cardUsd1: knobs.cardUsd1 ?? FastCheck.oneof(usd(15), usd(500)),
      walletUsd1: knobs.walletUsd1 ?? FastCheck.oneof({ weight: 3, arbitrary: FastCheck.constant(0) }, usd(100)),
      cardAgeDays: FastCheck.integer({ min: -2, max: 60 }),
      payments: FastCheck.array(
        FastCheck.record({ ago: FastCheck.integer({ min: 0, max: 40 * DAY }), usd: usd(300) }),
        {
          maxLength: 30
        }
      )
    }).map(
      ({ cardAgeDays, payments, targets, timeZone, weeklySpendUsd, ...rest }): DecisionInput => ({
        ...rest,
        strategy: { targets, weeklySpendUsd, timeZone },
        spending: {
          cardCreatedAt: at - cardAgeDays * DAY,
          payments: payments.map((p) => ({ at: at - p.ago, usd: p.usd }))
        }
      })
    )
  )

/** An instant inside a premarket, postmarket or overnight session. */
export const extendedHoursInstant: FastCheck.Arbitrary<number> = FastCheck.tuple(
  FastCheck.integer({ min: 0, max: (LAST - FIRST) / DAY }),
  FastCheck.nat(),
  FastCheck.nat()
).map(([day, pick, offset]) => {
  // The first trade date from `day` on.
  let sessions: ReadonlyArray<SessionInterval> = []
  for (let d = day; sessions.length === 0; d++) {
    sessions = sessionsFor(new Date(FIRST + d * DAY).toISOString().slice(0, 10)).filter((s) => s.session !== "regular")
  }
  const session = sessions[pick % sessions.length]!
  return session.start + (offset % (session.end - session.start))
})

/** A card's commitments: holds, pending clearings, an owed amount to the millionth, an allowance or none. */
export const cardCommitments: FastCheck.Arbitrary<CardCommitments> = FastCheck.record({
  heldUsd: FastCheck.oneof(FastCheck.constant(0), usd(200)),
  clearedPendingUsd: FastCheck.oneof(FastCheck.constant(0), usd(200)),
  owedUsd: FastCheck.oneof(
    { weight: 2, arbitrary: FastCheck.constant(0) },
    FastCheck.integer({ min: 1, max: 300_000_000 }).map((micros) => micros / 1_000_000)
  ),
  allowanceUsd: FastCheck.option(usd(1000), { nil: null })
})

/** Any decision input with commitments, its payments card payments (a typical one) or merchant orders. */
export const committedInput = (knobs: InputKnobs = {}): FastCheck.Arbitrary<DecisionInput> =>
  FastCheck.tuple(decisionInput(knobs), cardCommitments, FastCheck.boolean()).map(([input, commitments, card]) => ({
    ...input,
    commitments,
    spending: { ...input.spending, payments: input.spending.payments.map((payment) => ({ ...payment, card })) }
  }))
