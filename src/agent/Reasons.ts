/**
 * How decision reasons write amounts, instants and percentages for a card holder (pure).
 */
import { US_EQUITY_TIME_ZONE } from "../market/Calendar.js"

const usdFormat = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" })

/** `$1,234.50` */
export const formatUsd = (usd: number): string => usdFormat.format(usd)

const etFormat = new Intl.DateTimeFormat("en-US", {
  timeZone: US_EQUITY_TIME_ZONE,
  hourCycle: "h23",
  weekday: "short",
  month: "short",
  day: "numeric",
  hour: "2-digit",
  minute: "2-digit"
})

// A page of decisions names the same few instants again and again: memoised, bounded.
const MAX_ET_TEXTS = 4_096
const etTexts = new Map<number, string>()

/** New York time, `Mon Nov 23, 09:30 ET`. */
export const formatEt = (at: number): string => {
  const known = etTexts.get(at)
  if (known !== undefined) return known
  const part: Partial<Record<Intl.DateTimeFormatPartTypes, string>> = {}
  for (const { type, value } of etFormat.formatToParts(at)) part[type] = value
  const text = `${part.weekday} ${part.month} ${part.day}, ${part.hour}:${part.minute} ET`
  if (etTexts.size >= MAX_ET_TEXTS) etTexts.clear()
  etTexts.set(at, text)
  return text
}

/** A weight, `62.5%`. */
export const formatWeight = (weight: number): string => `${(weight * 100).toFixed(1)}%`

/** A spread vs the close reference, signed: `+0.40%`, `-2.50%`. */
export const formatSpread = (spread: number): string =>
  `${spread >= 0 ? "+" : "-"}${Math.abs(spread * 100).toFixed(2)}%`
