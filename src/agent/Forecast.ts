/**
 * The card's spending forecast (pure: the decision instant is an argument).
 *
 * 1. Daily rates. Take the 28 complete local days before the local day of `at`, in the strategy's time zone.
 *    A day's spend is the sum of the card's payments made during it, plus `weeklySpendUsd / 7` times the
 *    share of that day that passed before the card existed (a whole day before the card: the estimate alone;
 *    the day the card was issued: its payments plus the estimate for the hours before). The weekday rate is
 *    the mean over the 20 Monday-Friday days, the weekend rate the mean over the 8 Saturdays and Sundays.
 * 2. Spend over a window `[from, to)`. Each local day overlapping the window contributes its bucket's rate
 *    times the share of that day inside the window, measured in real time: a 25-hour DST day is one day, and
 *    half of it is 12.5 hours.
 *
 * See docs/agent.md, "Forecast".
 */
import { isWeekendDay, localDayOf, startOfLocalDay } from "../market/TimeZone.js"

export const LOOKBACK_DAYS = 28

/** A payment made with the card. */
export interface Payment {
  /** When it was made, ms since epoch. */
  readonly at: number
  /** Positive USD amount. */
  readonly usd: number
  /** A card-network payment (an authorization the network asked about), not a merchant order. */
  readonly card?: boolean
}

export interface SpendingHistory {
  /** When the card was issued, ms since epoch. */
  readonly cardCreatedAt: number
  /** The card's payments, in any order; those outside the lookback are ignored. */
  readonly payments: ReadonlyArray<Payment>
}

/** Average spend per local day, USD. */
export interface SpendRates {
  /** Per Monday to Friday. */
  readonly weekdayUsd: number
  /** Per Saturday or Sunday. */
  readonly weekendUsd: number
}

export interface SpendForecast {
  readonly rates: SpendRates
  /** Expected spend over `[from, to)`, USD (no buffer). */
  readonly usd: number
}

const clamp01 = (x: number): number => Math.min(1, Math.max(0, x))

/** The index of the last boundary at or before `at` (`starts` ascending, `starts[0] <= at`). */
const dayIndex = (starts: ReadonlyArray<number>, at: number): number => {
  let low = 0
  let high = starts.length - 1
  while (high - low > 1) {
    const middle = (low + high) >> 1
    if (starts[middle]! <= at) low = middle
    else high = middle
  }
  return low
}

/** Weekday and weekend daily rates from the 28 complete local days before the local day of `at`. */
export const spendRates = (
  history: SpendingHistory,
  weeklySpendUsd: number,
  timeZone: string,
  at: number
): SpendRates => {
  const firstDay = localDayOf(at, timeZone) - LOOKBACK_DAYS
  const starts = Array.from({ length: LOOKBACK_DAYS + 1 }, (_, i) => startOfLocalDay(firstDay + i, timeZone))
  const windowStart = starts[0]!
  const windowEnd = starts[LOOKBACK_DAYS]!
  const daily = starts.slice(0, LOOKBACK_DAYS).map((start, i) => {
    const length = starts[i + 1]! - start
    return (weeklySpendUsd / 7) * clamp01((history.cardCreatedAt - start) / length)
  })
  for (const payment of history.payments) {
    if (payment.at >= windowStart && payment.at < windowEnd) daily[dayIndex(starts, payment.at)]! += payment.usd
  }
  const bucket = (weekend: boolean) => {
    const days = daily.filter((_, i) => isWeekendDay(firstDay + i) === weekend)
    return days.reduce((sum, usd) => sum + usd, 0) / days.length
  }
  return { weekdayUsd: bucket(false), weekendUsd: bucket(true) }
}

/** Expected spend over `[from, to)` at the given daily rates; 0 when `to <= from`. */
export const expectedSpend = (rates: SpendRates, timeZone: string, from: number, to: number): number => {
  let total = 0
  let day = localDayOf(from, timeZone)
  let start = startOfLocalDay(day, timeZone)
  while (start < to) {
    const end = startOfLocalDay(day + 1, timeZone)
    const inside = Math.min(end, to) - Math.max(start, from)
    if (inside > 0) total += (isWeekendDay(day) ? rates.weekendUsd : rates.weekdayUsd) * (inside / (end - start))
    day += 1
    start = end
  }
  return total
}

/** The rates at `from` and the expected spend over `[from, to)`. */
export const forecastSpend = (
  history: SpendingHistory,
  weeklySpendUsd: number,
  timeZone: string,
  from: number,
  to: number
): SpendForecast => {
  const rates = spendRates(history, weeklySpendUsd, timeZone, from)
  return { rates, usd: expectedSpend(rates, timeZone, from, to) }
}

/**
 * The holder's typical card payment at `at`: the median of the card-network payments made in the
 * 28 days (of 24 hours) before `at`; 0 without any. What the next authorization most likely asks for.
 */
export const typicalCardPayment = (payments: ReadonlyArray<Payment>, at: number): number => {
  const since = at - LOOKBACK_DAYS * 86_400_000
  const amounts = payments
    .filter((payment) => payment.card === true && payment.at >= since && payment.at < at)
    .map((payment) => payment.usd)
    .sort((a, b) => a - b)
  if (amounts.length === 0) return 0
  const middle = amounts.length >> 1
  return amounts.length % 2 === 1 ? amounts[middle]! : (amounts[middle - 1]! + amounts[middle]!) / 2
}
