/** How amounts, times and long identifiers are shown. */

const usdFormat = new Intl.NumberFormat("en-US", { style: "currency", currency: "USD" })

export const usd = (amount: number) => usdFormat.format(amount)

export const percent = (fraction: number, digits = 1) => `${(fraction * 100).toFixed(digits)} %`

/** The browser's time zone, e.g. Europe/Paris. */
export const browserTimeZone = () => Intl.DateTimeFormat().resolvedOptions().timeZone

/** A time in the given zone (default the browser's), with the zone's short name: Nov 27, 2026, 12:45 PM EST. */
export const dateTime = (ms: number, timeZone?: string) =>
  new Intl.DateTimeFormat("en-US", {
    year: "numeric",
    month: "short",
    day: "numeric",
    hour: "numeric",
    minute: "2-digit",
    timeZoneName: "short",
    ...(timeZone === undefined ? {} : { timeZone })
  }).format(ms)

/** 0x1234…abcd */
export const shortHex = (hex: string, keep = 6) =>
  hex.length <= keep * 2 + 3 ? hex : `${hex.slice(0, keep)}…${hex.slice(-4)}`

/** Four characters at a time: 9406 1234 5678 9012 */
export const grouped = (text: string) => text.replace(/(.{4})(?=.)/g, "$1 ")

/** •••• •••• •••• 9012 */
export const maskedNumber = (digits: string) =>
  grouped(`${"•".repeat(Math.max(0, digits.length - 4))}${digits.slice(-4)}`)
