/**
 * US equity session calendar (NYSE holidays and early closes, 24/5 sessions) as a pure module.
 *
 * - Every instant is UTC milliseconds since the epoch.
 * - ET wall-clock times are converted only through the IANA zone `America/New_York` (`Intl`), never with
 *   a hard-coded -4/-5 offset.
 * - Holidays come from rules for any year plus a table of ad-hoc full closures (`defaultAdHocClosures`,
 *   extendable by passing another table to every function).
 * - Session instants are computed from day boundaries, never by scanning time; holidays are memoised
 *   per (table, year) and session boundaries per ET date.
 *
 * Rules and the reasonCode table are documented in docs/market.md. One file because the holiday
 * rules, the session boundaries and the status that reads them share one set of memoised tables.
 */
import { wallOf, offsetAt as zoneOffsetAt } from "./TimeZone.js"

/** A session of the US equity 24/5 week, or `closed`. */
export type UsSession = "overnight" | "premarket" | "regular" | "postmarket" | "closed"

/**
 * Why the calendar is in its current state.
 *
 * | reasonCode      | when |
 * |-----------------|------|
 * | `TRADING`       | one of the four sessions runs |
 * | `HOLIDAY`       | closed, and the ET date is a full closure; or closed in a slot that would be a session but for an adjacent full closure (20:00-24:00 ET the evening before it, 00:00-04:00 ET the morning after it) |
 * | `WEEKEND`       | closed on a Saturday or Sunday (ET) and not `HOLIDAY` |
 * | `MARKET_CLOSED` | any other closed time (Friday 20:00-24:00 ET, 17:00-20:00 ET after an early close) |
 */
export type CalendarReason = "TRADING" | "MARKET_CLOSED" | "HOLIDAY" | "WEEKEND"

/** An exchange closure decided outside the rules (national day of mourning, weather, ...). */
export interface AdHocClosure {
  /** `YYYY-MM-DD`, an ET calendar date. */
  readonly date: string
  readonly name: string
}

/**
 * Known ad-hoc full closures of the NYSE (recent years). Callers extend it by passing
 * `[...defaultAdHocClosures, { date, name }]` as the `adHoc` argument. Entries on a Saturday or Sunday
 * are ignored (the market is closed anyway); an entry on a rule holiday keeps the rule's name.
 */
export const defaultAdHocClosures: ReadonlyArray<AdHocClosure> = Object.freeze([
  Object.freeze({ date: "2012-10-29", name: "Hurricane Sandy" }),
  Object.freeze({ date: "2012-10-30", name: "Hurricane Sandy" }),
  Object.freeze({ date: "2018-12-05", name: "National Day of Mourning for George H. W. Bush" }),
  Object.freeze({ date: "2025-01-09", name: "National Day of Mourning for Jimmy Carter" })
])

/** A day with a regular session; `open` and `close` are UTC ms of 09:30 and 16:00 (13:00) ET. */
export interface TradingDay {
  readonly date: string
  readonly open: number
  readonly close: number
  readonly earlyClose: boolean
}

/** One session of a trade date: `[start, end)` in UTC ms. */
export interface SessionInterval {
  readonly session: Exclude<UsSession, "closed">
  readonly start: number
  readonly end: number
}

export interface CalendarStatus {
  readonly session: UsSession
  readonly reasonCode: CalendarReason
  /** Start of the next regular session strictly after the instant (UTC ms). */
  readonly nextOpenTime: number
  /** End of the current regular session, or of the next one when outside it (UTC ms). */
  readonly nextCloseTime: number
}

/** The seed's market status object. */
export interface MarketStatus {
  readonly openState: boolean
  readonly marketStatus:
    | "premarket"
    | "regular"
    | "postmarket"
    | "overnight"
    | "closed"
    | "offhours"
    | "pause"
    | "paused"
    | null
  readonly reasonCode: string | null
  readonly nextOpenTime: number | null
  readonly nextCloseTime: number | null
}

/**
 * Session boundaries, minutes after ET midnight. All of them lie at or after 03:00 ET, so never inside
 * the hour that a DST change skips or repeats (02:00 ET in America/New_York).
 */
const usSessionHours = Object.freeze({
  premarketStart: 4 * 60,
  regularStart: 9 * 60 + 30,
  regularEnd: 16 * 60,
  earlyRegularEnd: 13 * 60,
  postmarketEnd: 20 * 60,
  earlyPostmarketEnd: 17 * 60,
  overnightStart: 20 * 60
})

export const US_EQUITY_TIME_ZONE = "America/New_York"

// ---------------------------------------------------------------------------------------------------
// Civil-date arithmetic on day numbers (days since 1970-01-01), independent of any time zone.

const MINUTE_MS = 60_000
const DAY_MS = 86_400_000

const floorDiv = (a: number, b: number): number => Math.floor(a / b)
const mod = (a: number, b: number): number => ((a % b) + b) % b

/** Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil). */
const daysFromCivil = (year: number, month: number, day: number): number => {
  const y = month <= 2 ? year - 1 : year
  const era = floorDiv(y, 400)
  const yoe = y - era * 400
  const mp = month > 2 ? month - 3 : month + 9
  const doy = floorDiv(153 * mp + 2, 5) + day - 1
  const doe = yoe * 365 + floorDiv(yoe, 4) - floorDiv(yoe, 100) + doy
  return era * 146_097 + doe - 719_468
}

const civilFromDays = (days: number): { readonly year: number; readonly month: number; readonly day: number } => {
  const z = days + 719_468
  const era = floorDiv(z, 146_097)
  const doe = z - era * 146_097
  const yoe = floorDiv(doe - floorDiv(doe, 1460) + floorDiv(doe, 36_524) - floorDiv(doe, 146_096), 365)
  const doy = doe - (365 * yoe + floorDiv(yoe, 4) - floorDiv(yoe, 100))
  const mp = floorDiv(5 * doy + 2, 153)
  const day = doy - floorDiv(153 * mp + 2, 5) + 1
  const month = mp < 10 ? mp + 3 : mp - 9
  return { year: yoe + era * 400 + (month <= 2 ? 1 : 0), month, day }
}

/** 0 = Sunday ... 6 = Saturday. */
const weekdayOf = (days: number): number => mod(days + 4, 7)

const isWeekend = (days: number): boolean => {
  const wd = weekdayOf(days)
  return wd === 0 || wd === 6
}

const pad = (n: number, width: number): string => String(n).padStart(width, "0")

const formatDays = (days: number): string => {
  const { day, month, year } = civilFromDays(days)
  return `${pad(year, 4)}-${pad(month, 2)}-${pad(day, 2)}`
}

const DATE_RE = /^(\d{4})-(\d{2})-(\d{2})$/

/** Day number of a `YYYY-MM-DD` string, or undefined when it is not a real calendar date. */
const parseDays = (date: string): number | undefined => {
  const m = DATE_RE.exec(date)
  if (m === null) return undefined
  const year = Number(m[1])
  const month = Number(m[2])
  const day = Number(m[3])
  if (month < 1 || month > 12 || day < 1 || day > 31) return undefined
  const days = daysFromCivil(year, month, day)
  const back = civilFromDays(days)
  return back.month === month && back.day === day ? days : undefined
}

const parseDaysOrThrow = (date: string): number => {
  const days = parseDays(date)
  if (days === undefined) throw new RangeError(`Invalid date (expected YYYY-MM-DD): ${JSON.stringify(date)}`)
  return days
}

/** Whether a string is a real `YYYY-MM-DD` calendar date. */
export const isIsoDate = (date: string): boolean => parseDays(date) !== undefined

/** Ad-hoc entries whose date is not a real `YYYY-MM-DD` date (they are ignored); check tables at startup. */
export const invalidAdHocClosures = (adHoc: ReadonlyArray<AdHocClosure>): ReadonlyArray<AdHocClosure> =>
  adHoc.filter((c) => parseDays(c.date) === undefined)

// ---------------------------------------------------------------------------------------------------
// ET <-> UTC through Intl.

interface WallClock {
  readonly days: number
  /** Milliseconds after local midnight, whole seconds. */
  readonly msOfDay: number
}

/** ET wall clock (to the second) of an instant. */
const wallClockOf = (at: number): WallClock => {
  const wall = wallOf(at, US_EQUITY_TIME_ZONE)
  return { days: Math.floor(wall / DAY_MS), msOfDay: mod(wall, DAY_MS) }
}

/** ET offset (local minus UTC, ms) in force at an instant. */
const offsetAt = (at: number): number => zoneOffsetAt(at, US_EQUITY_TIME_ZONE)

/**
 * UTC ms of an ET wall-clock time. Exact for every time that exists exactly once; in the hour repeated
 * when DST ends it gives the first (EDT) occurrence; a time in the hour skipped when DST starts does not
 * exist and resolves to an adjacent instant. Session boundaries are never in either hour.
 */
const wallToUtc = (days: number, msOfDay: number): number => {
  const local = days * DAY_MS + msOfDay
  const first = offsetAt(local)
  const guess = local - first
  const second = offsetAt(guess)
  return second === first ? guess : local - second
}

const TIME_RE = /^(\d{2}):(\d{2})(?::(\d{2}))?$/

/**
 * UTC ms of an ET wall-clock time, e.g. `etToUtc("2027-03-15", "09:30") === Date.parse("2027-03-15T13:30:00Z")`.
 * Throws RangeError on a malformed date or time.
 */
export const etToUtc = (date: string, time: string): number => {
  const days = parseDaysOrThrow(date)
  const m = TIME_RE.exec(time)
  const hour = Number(m?.[1])
  const minute = Number(m?.[2])
  const second = Number(m?.[3] ?? 0)
  if (m === null || hour > 23 || minute > 59 || second > 59) {
    throw new RangeError(`Invalid time (expected HH:MM or HH:MM:SS): ${JSON.stringify(time)}`)
  }
  return wallToUtc(days, ((hour * 60 + minute) * 60 + second) * 1000)
}

const checkInstant = (at: number): number => {
  if (!Number.isFinite(at)) throw new RangeError(`Invalid instant: ${at}`)
  return at
}

/** The ET calendar date (`YYYY-MM-DD`) of an instant. */
export const etDateOf = (at: number): string => formatDays(wallClockOf(checkInstant(at)).days)

// ---------------------------------------------------------------------------------------------------
// Holiday rules.

/** Easter Sunday (day number) by the anonymous Gregorian algorithm (Meeus/Jones/Butcher). */
const easterDays = (year: number): number => {
  const a = mod(year, 19)
  const b = floorDiv(year, 100)
  const c = mod(year, 100)
  const d = floorDiv(b, 4)
  const e = mod(b, 4)
  const f = floorDiv(b + 8, 25)
  const g = floorDiv(b - f + 1, 3)
  const h = mod(19 * a + b - d - g + 15, 30)
  const i = floorDiv(c, 4)
  const k = mod(c, 4)
  const l = mod(32 + 2 * e + 2 * i - h - k, 7)
  const m = floorDiv(a + 11 * h + 22 * l, 451)
  const month = floorDiv(h + l - 7 * m + 114, 31)
  const day = mod(h + l - 7 * m + 114, 31) + 1
  return daysFromCivil(year, month, day)
}

/** Easter Sunday of a year, `YYYY-MM-DD`. */
export const easterSunday = (year: number): string => formatDays(easterDays(year))

/** The n-th (1-based) given weekday (0 = Sunday) of a month. */
const nthWeekday = (year: number, month: number, weekday: number, n: number): number => {
  const first = daysFromCivil(year, month, 1)
  return first + mod(weekday - weekdayOf(first), 7) + 7 * (n - 1)
}

const lastWeekday = (year: number, month: number, weekday: number): number => {
  const last = daysFromCivil(year, month + 1, 1) - 1
  return last - mod(weekdayOf(last) - weekday, 7)
}

const MONDAY = 1
const THURSDAY = 4

interface YearInfo {
  /** Full closures of the year (weekdays only), day number -> name. */
  readonly holidays: ReadonlyMap<number, string>
  /** 13:00 ET early closes of the year. */
  readonly earlyCloses: ReadonlySet<number>
  readonly holidayList: ReadonlyArray<{ date: string; name: string }>
  readonly earlyCloseList: ReadonlyArray<string>
}

const computeYear = (year: number, adHoc: ReadonlyArray<AdHocClosure>): YearInfo => {
  const holidays = new Map<number, string>()
  const add = (days: number, name: string) => {
    if (!isWeekend(days) && !holidays.has(days)) holidays.set(days, name)
  }
  /** Sat -> Fri, Sun -> Mon. */
  const nearestWeekday = (month: number, day: number, name: string) => {
    const days = daysFromCivil(year, month, day)
    const wd = weekdayOf(days)
    if (wd === 6) add(days - 1, `${name} (observed)`)
    else if (wd === 0) add(days + 1, `${name} (observed)`)
    else add(days, name)
  }

  // New Year's Day: Sunday -> Monday; Saturday -> not observed (Dec 31 of the previous year trades).
  const newYear = daysFromCivil(year, 1, 1)
  if (weekdayOf(newYear) === 0) add(newYear + 1, "New Year's Day (observed)")
  else add(newYear, "New Year's Day")
  add(nthWeekday(year, 1, MONDAY, 3), "Martin Luther King Jr. Day")
  add(nthWeekday(year, 2, MONDAY, 3), "Washington's Birthday")
  add(easterDays(year) - 2, "Good Friday")
  add(lastWeekday(year, 5, MONDAY), "Memorial Day")
  if (year >= 2022) nearestWeekday(6, 19, "Juneteenth National Independence Day")
  nearestWeekday(7, 4, "Independence Day")
  add(nthWeekday(year, 9, MONDAY, 1), "Labor Day")
  const thanksgiving = nthWeekday(year, 11, THURSDAY, 4)
  add(thanksgiving, "Thanksgiving Day")
  nearestWeekday(12, 25, "Christmas Day")
  for (const closure of adHoc) {
    const days = parseDays(closure.date)
    if (days !== undefined && civilFromDays(days).year === year) add(days, closure.name)
  }

  const earlyCloses = new Set<number>()
  const early = (days: number, monToThuOnly: boolean) => {
    const wd = weekdayOf(days)
    if (holidays.has(days) || isWeekend(days)) return
    if (monToThuOnly && wd > THURSDAY) return
    earlyCloses.add(days)
  }
  early(daysFromCivil(year, 7, 3), true)
  early(thanksgiving + 1, false)
  early(daysFromCivil(year, 12, 24), true)

  const sortedHolidays = [...holidays.entries()].sort((a, b) => a[0] - b[0])
  return {
    holidays: new Map(sortedHolidays),
    earlyCloses,
    holidayList: Object.freeze(sortedHolidays.map(([days, name]) => Object.freeze({ date: formatDays(days), name }))),
    earlyCloseList: Object.freeze([...earlyCloses].sort((a, b) => a - b).map(formatDays))
  }
}

// Memo per (ad-hoc table, year). Bounded: a caller asking about arbitrary years cannot grow it forever.
const MAX_YEARS_PER_TABLE = 64
const yearMemo = new WeakMap<ReadonlyArray<AdHocClosure>, Map<number, YearInfo>>()

const yearInfo = (year: number, adHoc: ReadonlyArray<AdHocClosure>): YearInfo => {
  let byYear = yearMemo.get(adHoc)
  if (byYear === undefined) {
    byYear = new Map()
    yearMemo.set(adHoc, byYear)
  }
  let info = byYear.get(year)
  if (info === undefined) {
    if (byYear.size >= MAX_YEARS_PER_TABLE) byYear.clear()
    info = computeYear(year, adHoc)
    byYear.set(year, info)
  }
  return info
}

const infoOfDay = (days: number, adHoc: ReadonlyArray<AdHocClosure>): YearInfo =>
  yearInfo(civilFromDays(days).year, adHoc)

const isHoliday = (days: number, adHoc: ReadonlyArray<AdHocClosure>): boolean =>
  infoOfDay(days, adHoc).holidays.has(days)

const isTradingDate = (days: number, adHoc: ReadonlyArray<AdHocClosure>): boolean =>
  !isWeekend(days) && !isHoliday(days, adHoc)

const isEarlyClose = (days: number, adHoc: ReadonlyArray<AdHocClosure>): boolean =>
  infoOfDay(days, adHoc).earlyCloses.has(days)

/**
 * The overnight session of trade date D runs from 20:00 ET on D-1 to 04:00 ET on D. It runs only when D is a
 * trading day and D-1 is not a full closure (no session at all on a full-closure date). D-1 is then a Sunday
 * or a trading day.
 */
const overnightRunsFor = (days: number, adHoc: ReadonlyArray<AdHocClosure>): boolean =>
  isTradingDate(days, adHoc) && !isHoliday(days - 1, adHoc)

/** Full closures of a year (rules + ad-hoc table), sorted by date. */
export const holidaysOf = (
  year: number,
  adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures
): ReadonlyArray<{ date: string; name: string }> => yearInfo(checkYear(year), adHoc).holidayList

/** 13:00 ET early closes of a year, sorted. */
export const earlyClosesOf = (
  year: number,
  adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures
): ReadonlyArray<string> => yearInfo(checkYear(year), adHoc).earlyCloseList

const checkYear = (year: number): number => {
  if (!Number.isSafeInteger(year)) throw new RangeError(`Invalid year: ${year}`)
  return year
}

// ---------------------------------------------------------------------------------------------------
// Session boundaries per ET date.

interface DayBounds {
  readonly premarketStart: number
  readonly regularStart: number
  readonly earlyRegularEnd: number
  readonly regularEnd: number
  readonly earlyPostmarketEnd: number
  readonly postmarketEnd: number
  readonly overnightStart: number
}

const MAX_BOUNDS = 4096
const boundsMemo = new Map<number, DayBounds>()

const boundsOf = (days: number): DayBounds => {
  let bounds = boundsMemo.get(days)
  if (bounds === undefined) {
    const at = (minutes: number) => wallToUtc(days, minutes * MINUTE_MS)
    const h = usSessionHours
    bounds = {
      premarketStart: at(h.premarketStart),
      regularStart: at(h.regularStart),
      earlyRegularEnd: at(h.earlyRegularEnd),
      regularEnd: at(h.regularEnd),
      earlyPostmarketEnd: at(h.earlyPostmarketEnd),
      postmarketEnd: at(h.postmarketEnd),
      overnightStart: at(h.overnightStart)
    }
    if (boundsMemo.size >= MAX_BOUNDS) boundsMemo.clear()
    boundsMemo.set(days, bounds)
  }
  return bounds
}

const tradingDayOf = (days: number, adHoc: ReadonlyArray<AdHocClosure>): TradingDay | undefined => {
  if (!isTradingDate(days, adHoc)) return undefined
  const bounds = boundsOf(days)
  const earlyClose = isEarlyClose(days, adHoc)
  return {
    date: formatDays(days),
    open: bounds.regularStart,
    close: earlyClose ? bounds.earlyRegularEnd : bounds.regularEnd,
    earlyClose
  }
}

/**
 * The regular session of an ET date, or undefined on a weekend or full closure.
 * Throws RangeError on a malformed date.
 */
export const tradingDay = (
  date: string,
  adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures
): TradingDay | undefined => tradingDayOf(parseDaysOrThrow(date), adHoc)

/**
 * The sessions of a trade date, in order (the overnight session starts at 20:00 ET the evening before);
 * empty on a weekend or full closure. Throws RangeError on a malformed date.
 */
export const sessionsFor = (
  date: string,
  adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures
): ReadonlyArray<SessionInterval> => {
  const days = parseDaysOrThrow(date)
  if (!isTradingDate(days, adHoc)) return []
  const bounds = boundsOf(days)
  const early = isEarlyClose(days, adHoc)
  const close = early ? bounds.earlyRegularEnd : bounds.regularEnd
  const sessions: Array<SessionInterval> = []
  if (overnightRunsFor(days, adHoc)) {
    sessions.push({ session: "overnight", start: boundsOf(days - 1).overnightStart, end: bounds.premarketStart })
  }
  sessions.push(
    { session: "premarket", start: bounds.premarketStart, end: bounds.regularStart },
    { session: "regular", start: bounds.regularStart, end: close },
    { session: "postmarket", start: close, end: early ? bounds.earlyPostmarketEnd : bounds.postmarketEnd }
  )
  return sessions
}

// ---------------------------------------------------------------------------------------------------
// Status at an instant.

const sessionAt = (at: number, days: number, adHoc: ReadonlyArray<AdHocClosure>): UsSession => {
  const bounds = boundsOf(days)
  if (at >= bounds.overnightStart) return overnightRunsFor(days + 1, adHoc) ? "overnight" : "closed"
  if (at < bounds.premarketStart) return overnightRunsFor(days, adHoc) ? "overnight" : "closed"
  if (!isTradingDate(days, adHoc)) return "closed"
  if (at < bounds.regularStart) return "premarket"
  const early = isEarlyClose(days, adHoc)
  if (at < (early ? bounds.earlyRegularEnd : bounds.regularEnd)) return "regular"
  if (at < (early ? bounds.earlyPostmarketEnd : bounds.postmarketEnd)) return "postmarket"
  return "closed"
}

const closedReason = (at: number, days: number, adHoc: ReadonlyArray<AdHocClosure>): CalendarReason => {
  if (isHoliday(days, adHoc)) return "HOLIDAY"
  const bounds = boundsOf(days)
  // The overnight slot suppressed by a full closure: the evening before it, the early morning after it.
  if (at >= bounds.overnightStart && isHoliday(days + 1, adHoc)) return "HOLIDAY"
  if (at < bounds.premarketStart && isTradingDate(days, adHoc) && isHoliday(days - 1, adHoc)) return "HOLIDAY"
  if (isWeekend(days)) return "WEEKEND"
  return "MARKET_CLOSED"
}

/** Guard against an ad-hoc table that closes the market for longer than this (never happened: max 4 days). */
const MAX_SEARCH_DAYS = 400

const nextRegular = (
  at: number,
  days: number,
  adHoc: ReadonlyArray<AdHocClosure>,
  pick: (day: TradingDay) => number
): number => {
  for (let d = days; d < days + MAX_SEARCH_DAYS; d++) {
    const day = tradingDayOf(d, adHoc)
    if (day !== undefined && pick(day) > at) return pick(day)
  }
  throw new RangeError(`No regular session within ${MAX_SEARCH_DAYS} days after ${formatDays(days)}`)
}

const pickOpen = (day: TradingDay) => day.open
const pickClose = (day: TradingDay) => day.close

/** Start of the next regular session strictly after `at`. */
export const nextOpenTime = (at: number, adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures): number =>
  nextRegular(checkInstant(at), wallClockOf(at).days, adHoc, pickOpen)

/** End of the regular session containing `at`, else of the next regular session. */
export const nextCloseTime = (at: number, adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures): number =>
  nextRegular(checkInstant(at), wallClockOf(at).days, adHoc, pickClose)

/** The calendar's session, reason and next regular open/close at an instant (UTC ms). Throws RangeError on NaN/Infinity. */
export const calendarStatus = (
  at: number,
  adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures
): CalendarStatus => {
  const days = wallClockOf(checkInstant(at)).days
  const session = sessionAt(at, days, adHoc)
  return {
    session,
    reasonCode: session === "closed" ? closedReason(at, days, adHoc) : "TRADING",
    nextOpenTime: nextRegular(at, days, adHoc, pickOpen),
    nextCloseTime: nextRegular(at, days, adHoc, pickClose)
  }
}

/**
 * The seed's `MarketStatus` for the calendar alone. Devnet tokens trade in all four sessions (24/5), so
 * `openState` is `session !== "closed"`. Token-level states (`paused`, `ASSET_PAUSED`) are added by the
 * Market service.
 */
export const marketStatusAt = (at: number, adHoc: ReadonlyArray<AdHocClosure> = defaultAdHocClosures): MarketStatus => {
  const status = calendarStatus(at, adHoc)
  return {
    openState: status.session !== "closed",
    marketStatus: status.session,
    reasonCode: status.reasonCode,
    nextOpenTime: status.nextOpenTime,
    nextCloseTime: status.nextCloseTime
  }
}
