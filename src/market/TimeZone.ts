/**
 * Local calendar days in any IANA time zone, through `Intl` (pure: no clock, no I/O).
 *
 * A local day is named by its day number (days since 1970-01-01 of its civil date). Its start is the first
 * instant whose local date is that day, so a day may last 23 or 25 hours (DST), and a day whose midnight a
 * DST change skips (America/Santiago in September) starts at the change.
 */

const SECOND_MS = 1000
const HOUR_MS = 3_600_000
const DAY_MS = 86_400_000

const mod = (a: number, b: number): number => ((a % b) + b) % b

// Bounded: zone names come from users, in any letter case.
const MAX_FORMATTERS = 1024
const formatters = new Map<string, Intl.DateTimeFormat>()

/** A formatter per zone; throws RangeError for a name `Intl` does not know. */
const formatterOf = (timeZone: string): Intl.DateTimeFormat => {
  let formatter = formatters.get(timeZone)
  if (formatter === undefined) {
    formatter = new Intl.DateTimeFormat("en-US", {
      timeZone,
      hourCycle: "h23",
      year: "numeric",
      month: "2-digit",
      day: "2-digit",
      hour: "2-digit",
      minute: "2-digit",
      second: "2-digit"
    })
    if (formatters.size >= MAX_FORMATTERS) formatters.clear()
    formatters.set(timeZone, formatter)
  }
  return formatter
}

// The agent decides a page of cards at one instant: the same (zone, instant) pairs come back for every
// card, and `formatToParts` costs microseconds each. Memoised, bounded.
const MAX_WALLS = 16_384
const walls = new Map<string, number>()

/** Local wall clock of an instant as "ms since 1970-01-01T00:00 local", whole seconds. */
export const wallOf = (at: number, timeZone: string): number => {
  const key = `${timeZone} ${at}`
  const known = walls.get(key)
  if (known !== undefined) return known
  const field: Partial<Record<Intl.DateTimeFormatPartTypes, number>> = {}
  for (const part of formatterOf(timeZone).formatToParts(at)) field[part.type] = Number(part.value)
  const { year = 0, month = 1, day = 1, hour = 0, minute = 0, second = 0 } = field
  const wall = Date.UTC(year, month - 1, day, hour, minute, second)
  if (walls.size >= MAX_WALLS) walls.clear()
  walls.set(key, wall)
  return wall
}

/** Local minus UTC, ms, in force at an instant. */
export const offsetAt = (at: number, timeZone: string): number => wallOf(at, timeZone) - (at - mod(at, SECOND_MS))

/** The local day number of an instant. */
export const localDayOf = (at: number, timeZone: string): number => Math.floor(wallOf(at, timeZone) / DAY_MS)

/** 0 = Sunday ... 6 = Saturday. */
const weekdayOfDay = (day: number): number => mod(day + 4, 7)

export const isWeekendDay = (day: number): boolean => {
  const weekday = weekdayOfDay(day)
  return weekday === 0 || weekday === 6
}

// Day starts are asked for the same few dozen days by every decision: memoised per (zone, day), bounded.
const MAX_DAY_STARTS = 16_384
const dayStarts = new Map<string, number>()

/** The first instant (UTC ms) of a local day. */
export const startOfLocalDay = (day: number, timeZone: string): number => {
  const key = `${timeZone} ${day}`
  let start = dayStarts.get(key)
  if (start === undefined) {
    start = computeStartOfLocalDay(day, timeZone)
    if (dayStarts.size >= MAX_DAY_STARTS) dayStarts.clear()
    dayStarts.set(key, start)
  }
  return start
}

const computeStartOfLocalDay = (day: number, timeZone: string): number => {
  const midnight = day * DAY_MS
  const guess = midnight - offsetAt(midnight - offsetAt(midnight, timeZone), timeZone)
  if (wallOf(guess, timeZone) === midnight && localDayOf(guess - SECOND_MS, timeZone) < day) return guess
  // Midnight skipped or repeated by a zone change: search the first second of the day. Offsets lie
  // within -12 h .. +14 h, so the day starts within 15 hours of `midnight` read as UTC.
  let before = Math.floor((midnight - 15 * HOUR_MS) / SECOND_MS)
  let from = Math.ceil((midnight + 15 * HOUR_MS) / SECOND_MS)
  while (from - before > 1) {
    const middle = Math.floor((before + from) / 2)
    if (localDayOf(middle * SECOND_MS, timeZone) >= day) from = middle
    else before = middle
  }
  return from * SECOND_MS
}

/**
 * The zone name to store for a user-given one, or undefined when it is not an IANA zone name `Intl` knows.
 * The spelling is kept (an alias such as `Asia/Kolkata` or `US/Eastern` stays as given) except for letter
 * case, which takes the zone database's when the name is canonical (`america/new_york` ->
 * `America/New_York`). Offsets (`+01:00`) are not zone names.
 */
export const normaliseTimeZone = (name: string): string | undefined => {
  if (!/^[A-Za-z][A-Za-z0-9_+\-/]*$/.test(name)) return undefined
  try {
    const resolved = formatterOf(name).resolvedOptions().timeZone
    return resolved.toLowerCase() === name.toLowerCase() ? resolved : name
  } catch {
    return undefined
  }
}
