import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import {
  type AdHocClosure,
  type CalendarReason,
  calendarStatus,
  defaultAdHocClosures,
  earlyClosesOf,
  easterSunday,
  etDateOf,
  etToUtc,
  holidaysOf,
  invalidAdHocClosures,
  isIsoDate,
  marketStatusAt,
  nextCloseTime,
  nextOpenTime,
  sessionsFor,
  tradingDay,
  type UsSession
} from "../../src/market/Calendar.js"

// ---------------------------------------------------------------------------------------------------
// Test-side helpers, independent of the module: ET wall clock through a separate Intl formatter, civil
// date arithmetic through Date.UTC.

const MINUTE = 60_000
const HOUR = 60 * MINUTE
const DAY = 24 * HOUR
const Z = (iso: string): number => {
  const ms = Date.parse(iso)
  if (Number.isNaN(ms)) throw new Error(`bad ISO ${iso}`)
  return ms
}
const iso = (ms: number): string => new Date(ms).toISOString()

const nyParts = new Intl.DateTimeFormat("en-GB", {
  timeZone: "America/New_York",
  weekday: "short",
  year: "numeric",
  month: "2-digit",
  day: "2-digit",
  hour: "2-digit",
  minute: "2-digit",
  hourCycle: "h23"
})

interface Et {
  readonly date: string
  readonly weekday: string
  /** Minutes after ET midnight. */
  readonly minutes: number
}

const et = (at: number): Et => {
  const p: Record<string, string> = {}
  for (const part of nyParts.formatToParts(at)) p[part.type] = part.value
  return {
    date: `${p.year}-${p.month}-${p.day}`,
    weekday: p.weekday ?? "",
    minutes: Number(p.hour) * 60 + Number(p.minute)
  }
}

const addDays = (date: string, n: number): string => iso(Date.parse(`${date}T00:00:00Z`) + n * DAY).slice(0, 10)
const weekdayOfDate = (date: string): number => new Date(`${date}T00:00:00Z`).getUTCDay()
const isWeekendDate = (date: string): boolean => weekdayOfDate(date) === 0 || weekdayOfDate(date) === 6
const datesOfYear = (year: number): Array<string> => {
  const out: Array<string> = []
  for (let d = `${year}-01-01`; d.startsWith(String(year)); d = addDays(d, 1)) out.push(d)
  return out
}

// ---------------------------------------------------------------------------------------------------
// domain.md §1.2: NYSE full closures and 13:00 ET early closes, 2025-2028.

const table: Record<number, { readonly closures: ReadonlyArray<string>; readonly early: ReadonlyArray<string> }> = {
  2025: {
    closures: [
      "2025-01-01",
      "2025-01-09",
      "2025-01-20",
      "2025-02-17",
      "2025-04-18",
      "2025-05-26",
      "2025-06-19",
      "2025-07-04",
      "2025-09-01",
      "2025-11-27",
      "2025-12-25"
    ],
    early: ["2025-07-03", "2025-11-28", "2025-12-24"]
  },
  2026: {
    closures: [
      "2026-01-01",
      "2026-01-19",
      "2026-02-16",
      "2026-04-03",
      "2026-05-25",
      "2026-06-19",
      "2026-07-03",
      "2026-09-07",
      "2026-11-26",
      "2026-12-25"
    ],
    early: ["2026-11-27", "2026-12-24"]
  },
  2027: {
    closures: [
      "2027-01-01",
      "2027-01-18",
      "2027-02-15",
      "2027-03-26",
      "2027-05-31",
      "2027-06-18",
      "2027-07-05",
      "2027-09-06",
      "2027-11-25",
      "2027-12-24"
    ],
    early: ["2027-11-26"]
  },
  2028: {
    closures: [
      "2028-01-17",
      "2028-02-21",
      "2028-04-14",
      "2028-05-29",
      "2028-06-19",
      "2028-07-04",
      "2028-09-04",
      "2028-11-23",
      "2028-12-25"
    ],
    early: ["2028-07-03", "2028-11-24"]
  }
}
const TABLE_YEARS = [2025, 2026, 2027, 2028] as const
const tableHolidays = new Set(TABLE_YEARS.flatMap((y) => table[y]?.closures ?? []))
const tableEarly = new Set(TABLE_YEARS.flatMap((y) => table[y]?.early ?? []))

describe("NYSE closures and early closes (domain.md §1.2)", () => {
  for (const year of TABLE_YEARS) {
    const expected = table[year]!
    it(`${year}: full closures exactly as in the table`, () => {
      expect(holidaysOf(year).map((h) => h.date)).toEqual(expected.closures)
    })
    it(`${year}: 13:00 ET early closes exactly as in the table`, () => {
      expect(earlyClosesOf(year)).toEqual(expected.early)
    })
    it(`${year}: every other weekday is a full trading day (09:30-16:00 ET)`, () => {
      let weekdays = 0
      for (const date of datesOfYear(year)) {
        const day = tradingDay(date)
        if (isWeekendDate(date)) {
          expect(day, date).toBeUndefined()
          continue
        }
        weekdays++
        if (expected.closures.includes(date)) {
          expect(day, date).toBeUndefined()
          continue
        }
        const early = expected.early.includes(date)
        expect(day, date).toEqual({
          date,
          open: etToUtc(date, "09:30"),
          close: etToUtc(date, early ? "13:00" : "16:00"),
          earlyClose: early
        })
      }
      expect(weekdays).toBe(year === 2028 ? 260 : 261)
    })
  }

  it("names the holidays, including the observed ones and the ad-hoc closure", () => {
    expect(holidaysOf(2025)).toEqual([
      { date: "2025-01-01", name: "New Year's Day" },
      { date: "2025-01-09", name: "National Day of Mourning for Jimmy Carter" },
      { date: "2025-01-20", name: "Martin Luther King Jr. Day" },
      { date: "2025-02-17", name: "Washington's Birthday" },
      { date: "2025-04-18", name: "Good Friday" },
      { date: "2025-05-26", name: "Memorial Day" },
      { date: "2025-06-19", name: "Juneteenth National Independence Day" },
      { date: "2025-07-04", name: "Independence Day" },
      { date: "2025-09-01", name: "Labor Day" },
      { date: "2025-11-27", name: "Thanksgiving Day" },
      { date: "2025-12-25", name: "Christmas Day" }
    ])
    expect(holidaysOf(2027).filter((h) => h.name.endsWith("(observed)"))).toEqual([
      { date: "2027-06-18", name: "Juneteenth National Independence Day (observed)" },
      { date: "2027-07-05", name: "Independence Day (observed)" },
      { date: "2027-12-24", name: "Christmas Day (observed)" }
    ])
  })

  it("New Year on a Saturday is not observed: Fri 2027-12-31 is a full trading day", () => {
    expect(tradingDay("2027-12-31")).toEqual({
      date: "2027-12-31",
      open: Z("2027-12-31T14:30:00Z"),
      close: 1830286800000,
      earlyClose: false
    })
    expect(holidaysOf(2028).some((h) => h.date.endsWith("-01-01") || h.date === "2027-12-31")).toBe(false)
  })

  it("New Year on a Sunday is observed Monday (2023-01-02, 2034-01-02)", () => {
    expect(holidaysOf(2023)[0]).toEqual({ date: "2023-01-02", name: "New Year's Day (observed)" })
    expect(holidaysOf(2034)[0]).toEqual({ date: "2034-01-02", name: "New Year's Day (observed)" })
  })

  it("rules reproduce other known NYSE years (2021 without Juneteenth, 2022, 2024)", () => {
    expect(holidaysOf(2021).map((h) => h.date)).toEqual([
      "2021-01-01",
      "2021-01-18",
      "2021-02-15",
      "2021-04-02",
      "2021-05-31",
      "2021-07-05",
      "2021-09-06",
      "2021-11-25",
      "2021-12-24"
    ])
    expect(earlyClosesOf(2021)).toEqual(["2021-11-26"])
    expect(holidaysOf(2022).map((h) => h.date)).toEqual([
      "2022-01-17",
      "2022-02-21",
      "2022-04-15",
      "2022-05-30",
      "2022-06-20",
      "2022-07-04",
      "2022-09-05",
      "2022-11-24",
      "2022-12-26"
    ])
    expect(earlyClosesOf(2022)).toEqual(["2022-11-25"])
    expect(holidaysOf(2024).map((h) => h.date)).toEqual([
      "2024-01-01",
      "2024-01-15",
      "2024-02-19",
      "2024-03-29",
      "2024-05-27",
      "2024-06-19",
      "2024-07-04",
      "2024-09-02",
      "2024-11-28",
      "2024-12-25"
    ])
    expect(earlyClosesOf(2024)).toEqual(["2024-07-03", "2024-11-29", "2024-12-24"])
  })

  it("Easter by the anonymous Gregorian algorithm", () => {
    expect([1818, 2000, 2019, 2024, 2025, 2026, 2027, 2028, 2038, 2285].map((y) => easterSunday(y))).toEqual([
      "1818-03-22",
      "2000-04-23",
      "2019-04-21",
      "2024-03-31",
      "2025-04-20",
      "2026-04-05",
      "2027-03-28",
      "2028-04-16",
      "2038-04-25",
      "2285-03-22"
    ])
  })
})

describe("ad-hoc closures", () => {
  const extended: ReadonlyArray<AdHocClosure> = [
    ...defaultAdHocClosures,
    { date: "2026-12-31", name: "Test closure" },
    { date: "2026-12-26", name: "Saturday entry (ignored)" },
    { date: "2026-02-30", name: "Invalid entry (ignored)" }
  ]

  it("the default table holds 2025-01-09 and is frozen", () => {
    expect(defaultAdHocClosures).toContainEqual({
      date: "2025-01-09",
      name: "National Day of Mourning for Jimmy Carter"
    })
    expect(Object.isFrozen(defaultAdHocClosures)).toBe(true)
    expect(defaultAdHocClosures.every((c) => isIsoDate(c.date))).toBe(true)
  })

  it("an extended table adds weekday closures; weekend and invalid entries are ignored", () => {
    expect(holidaysOf(2026, extended).slice(-2)).toEqual([
      { date: "2026-12-25", name: "Christmas Day" },
      { date: "2026-12-31", name: "Test closure" }
    ])
    expect(invalidAdHocClosures(extended)).toEqual([{ date: "2026-02-30", name: "Invalid entry (ignored)" }])
    expect(tradingDay("2026-12-31", extended)).toBeUndefined()
    expect(tradingDay("2026-12-31")?.open).toBe(Z("2026-12-31T14:30:00Z"))
    expect(holidaysOf(2026)).toHaveLength(10)
  })

  it("without the table entry, 2025-01-09 would be a trading day", () => {
    expect(tradingDay("2025-01-09", [])?.open).toBe(Z("2025-01-09T14:30:00Z"))
    expect(holidaysOf(2025, []).map((h) => h.date)).not.toContain("2025-01-09")
  })

  it("an ad-hoc closure suppresses the overnight session before it and moves nextOpenTime", () => {
    const wedEvening = etToUtc("2026-12-30", "21:00")
    expect(calendarStatus(wedEvening)).toEqual({
      session: "overnight",
      reasonCode: "TRADING",
      nextOpenTime: Z("2026-12-31T14:30:00Z"),
      nextCloseTime: Z("2026-12-31T21:00:00Z")
    })
    expect(calendarStatus(wedEvening, extended)).toEqual({
      session: "closed",
      reasonCode: "HOLIDAY",
      nextOpenTime: Z("2027-01-04T14:30:00Z"),
      nextCloseTime: Z("2027-01-04T21:00:00Z")
    })
    expect(calendarStatus(Z("2025-01-09T15:00:00Z"))).toMatchObject({ session: "closed", reasonCode: "HOLIDAY" })
  })
})

// ---------------------------------------------------------------------------------------------------
// domain.md §1.3 test vectors (ET wall time -> UTC ms).

const vectors: ReadonlyArray<{
  date: string
  time: string
  iso: string
  ms: number
  via: "open" | "close" | "overnight"
}> = [
  { date: "2026-11-20", time: "09:30", iso: "2026-11-20T14:30:00Z", ms: 1795185000000, via: "open" },
  { date: "2026-11-20", time: "16:00", iso: "2026-11-20T21:00:00Z", ms: 1795208400000, via: "close" },
  { date: "2026-11-22", time: "20:00", iso: "2026-11-23T01:00:00Z", ms: 1795395600000, via: "overnight" },
  { date: "2026-11-27", time: "13:00", iso: "2026-11-27T18:00:00Z", ms: 1795802400000, via: "close" },
  { date: "2026-11-30", time: "09:30", iso: "2026-11-30T14:30:00Z", ms: 1796049000000, via: "open" },
  { date: "2026-12-24", time: "13:00", iso: "2026-12-24T18:00:00Z", ms: 1798135200000, via: "close" },
  { date: "2026-12-28", time: "09:30", iso: "2026-12-28T14:30:00Z", ms: 1798468200000, via: "open" },
  { date: "2027-03-12", time: "16:00", iso: "2027-03-12T21:00:00Z", ms: 1804885200000, via: "close" },
  { date: "2027-03-15", time: "09:30", iso: "2027-03-15T13:30:00Z", ms: 1805117400000, via: "open" },
  { date: "2027-03-25", time: "16:00", iso: "2027-03-25T20:00:00Z", ms: 1806004800000, via: "close" },
  { date: "2027-03-29", time: "09:30", iso: "2027-03-29T13:30:00Z", ms: 1806327000000, via: "open" },
  { date: "2027-11-26", time: "13:00", iso: "2027-11-26T18:00:00Z", ms: 1827252000000, via: "close" },
  { date: "2027-12-31", time: "16:00", iso: "2027-12-31T21:00:00Z", ms: 1830286800000, via: "close" },
  { date: "2028-07-03", time: "13:00", iso: "2028-07-03T17:00:00Z", ms: 1846256400000, via: "close" }
]

describe("ET -> UTC vectors (domain.md §1.3)", () => {
  for (const v of vectors) {
    it(`${v.date} ${v.time} ET = ${v.iso}`, () => {
      expect(Date.parse(v.iso)).toBe(v.ms)
      expect(etToUtc(v.date, v.time)).toBe(v.ms)
      if (v.via === "overnight") {
        const tradeDate = addDays(v.date, 1)
        expect(sessionsFor(tradeDate)[0]).toEqual({
          session: "overnight",
          start: v.ms,
          end: etToUtc(tradeDate, "04:00")
        })
        expect(calendarStatus(v.ms).session).toBe("overnight")
        expect(calendarStatus(v.ms - 1).session).toBe("closed")
      } else {
        expect(tradingDay(v.date)?.[v.via]).toBe(v.ms)
        expect(calendarStatus(v.ms).session).toBe(v.via === "open" ? "regular" : "postmarket")
        expect(calendarStatus(v.ms - 1).session).toBe(v.via === "open" ? "premarket" : "regular")
      }
    })
  }

  it("the vectors chain: close -> nextOpenTime skips weekends and holidays", () => {
    expect(nextOpenTime(1795208400000)).toBe(Z("2026-11-23T14:30:00Z"))
    expect(nextOpenTime(1795802400000)).toBe(1796049000000) // after the Thanksgiving Friday early close
    expect(nextOpenTime(1798135200000)).toBe(1798468200000) // Christmas Eve early close -> Monday
    expect(nextOpenTime(1804885200000)).toBe(1805117400000) // last EST Friday -> first EDT Monday
    expect(nextOpenTime(1806004800000)).toBe(1806327000000) // Good Friday skipped
    expect(nextCloseTime(1806004800000)).toBe(Z("2027-03-29T20:00:00Z"))
    expect(nextOpenTime(1830286800000)).toBe(Z("2028-01-03T14:30:00Z"))
  })

  it("DST change days: wall times around the switch", () => {
    // 2027-03-14: 02:00 EST -> 03:00 EDT. 2026-11-01: 02:00 EDT -> 01:00 EST.
    expect(etToUtc("2027-03-14", "01:59")).toBe(Z("2027-03-14T06:59:00Z"))
    expect(etToUtc("2027-03-14", "03:00")).toBe(Z("2027-03-14T07:00:00Z"))
    expect(etToUtc("2027-03-14", "20:00")).toBe(Z("2027-03-15T00:00:00Z"))
    expect(etToUtc("2026-11-01", "00:30")).toBe(Z("2026-11-01T04:30:00Z"))
    expect(etToUtc("2026-11-01", "01:30")).toBe(Z("2026-11-01T05:30:00Z")) // repeated hour: first (EDT) occurrence
    expect(etToUtc("2026-11-01", "03:00")).toBe(Z("2026-11-01T08:00:00Z"))
    expect(etToUtc("2026-11-01", "20:00")).toBe(Z("2026-11-02T01:00:00Z"))
    expect(etDateOf(Z("2026-11-01T04:59:59Z"))).toBe("2026-11-01")
    expect(etDateOf(Z("2026-11-02T04:59:59Z"))).toBe("2026-11-01")
    expect(etDateOf(Z("2026-11-02T05:00:00Z"))).toBe("2026-11-02")
  })

  it("DST change days: sessions on the Sunday of the switch and the first trading day after it", () => {
    // Spring 2027: Sunday overnight starts 20:00 EDT = 00:00Z; Monday opens 13:30Z.
    expect(sessionsFor("2027-03-15")).toEqual([
      { session: "overnight", start: Z("2027-03-15T00:00:00Z"), end: Z("2027-03-15T08:00:00Z") },
      { session: "premarket", start: Z("2027-03-15T08:00:00Z"), end: Z("2027-03-15T13:30:00Z") },
      { session: "regular", start: Z("2027-03-15T13:30:00Z"), end: Z("2027-03-15T20:00:00Z") },
      { session: "postmarket", start: Z("2027-03-15T20:00:00Z"), end: Z("2027-03-16T00:00:00Z") }
    ])
    expect(calendarStatus(Z("2027-03-14T23:59:59Z")).session).toBe("closed")
    expect(calendarStatus(Z("2027-03-15T00:00:00Z")).session).toBe("overnight")
    expect(calendarStatus(Z("2027-03-15T13:29:59Z")).session).toBe("premarket")
    expect(calendarStatus(Z("2027-03-15T13:30:00Z")).session).toBe("regular")
    // Autumn 2026: Sunday overnight starts 20:00 EST = 01:00Z; Monday opens 14:30Z.
    expect(sessionsFor("2026-11-02")).toEqual([
      { session: "overnight", start: Z("2026-11-02T01:00:00Z"), end: Z("2026-11-02T09:00:00Z") },
      { session: "premarket", start: Z("2026-11-02T09:00:00Z"), end: Z("2026-11-02T14:30:00Z") },
      { session: "regular", start: Z("2026-11-02T14:30:00Z"), end: Z("2026-11-02T21:00:00Z") },
      { session: "postmarket", start: Z("2026-11-02T21:00:00Z"), end: Z("2026-11-03T01:00:00Z") }
    ])
    expect(tradingDay("2026-10-30")).toMatchObject({
      open: Z("2026-10-30T13:30:00Z"),
      close: Z("2026-10-30T20:00:00Z")
    })
    // First EDT Monday of each year 2024-2030 opens at 13:30Z, the Friday before closes at 21:00Z.
    for (const monday of [
      "2024-03-11",
      "2025-03-10",
      "2026-03-09",
      "2027-03-15",
      "2028-03-13",
      "2029-03-12",
      "2030-03-11"
    ]) {
      expect(tradingDay(monday)?.open, monday).toBe(Z(`${monday}T13:30:00Z`))
      const friday = addDays(monday, -3)
      expect(tradingDay(friday)?.close, friday).toBe(Z(`${friday}T21:00:00Z`))
      expect(nextOpenTime(Z(`${friday}T21:00:00Z`)), friday).toBe(Z(`${monday}T13:30:00Z`))
    }
  })

  it("every trading day 2024-2030 opens at 09:30 ET and closes at 16:00/13:00 ET (checked back through Intl)", () => {
    let days = 0
    for (let year = 2024; year <= 2030; year++) {
      for (const date of datesOfYear(year)) {
        const day = tradingDay(date)
        if (day === undefined) continue
        days++
        expect(et(day.open)).toEqual({ date, weekday: et(day.open).weekday, minutes: 9 * 60 + 30 })
        expect(et(day.close).minutes).toBe(day.earlyClose ? 13 * 60 : 16 * 60)
        expect(et(day.close).date).toBe(date)
      }
    }
    expect(days).toBeGreaterThan(7 * 248)
  })
})

// ---------------------------------------------------------------------------------------------------
// Named scenarios.

const at = (date: string, time: string) => etToUtc(date, time)
const status = (date: string, time: string) => calendarStatus(at(date, time))

describe("Thanksgiving 2026", () => {
  const fridayOpen = Z("2026-11-27T14:30:00Z")
  const fridayClose = Z("2026-11-27T18:00:00Z")

  it("Wednesday 2026-11-25: postmarket to 20:00, then no overnight session (closed, HOLIDAY)", () => {
    expect(status("2026-11-25", "19:59").session).toBe("postmarket")
    for (const time of ["20:00", "22:00", "23:59"]) {
      expect(status("2026-11-25", time), time).toEqual({
        session: "closed",
        reasonCode: "HOLIDAY",
        nextOpenTime: fridayOpen,
        nextCloseTime: fridayClose
      })
    }
  })

  it("Thursday 2026-11-26 is closed all day (HOLIDAY), including the evening", () => {
    for (const time of ["00:00", "03:59", "04:00", "09:30", "12:00", "16:00", "20:00", "23:59"]) {
      expect(status("2026-11-26", time), time).toEqual({
        session: "closed",
        reasonCode: "HOLIDAY",
        nextOpenTime: fridayOpen,
        nextCloseTime: fridayClose
      })
    }
  })

  it("Friday 2026-11-27: no overnight, premarket 04:00, regular to 13:00, postmarket 13:00-17:00", () => {
    expect(sessionsFor("2026-11-27")).toEqual([
      { session: "premarket", start: Z("2026-11-27T09:00:00Z"), end: fridayOpen },
      { session: "regular", start: fridayOpen, end: fridayClose },
      { session: "postmarket", start: fridayClose, end: Z("2026-11-27T22:00:00Z") }
    ])
    const expected: ReadonlyArray<[string, UsSession, CalendarReason]> = [
      ["00:00", "closed", "HOLIDAY"],
      ["03:59", "closed", "HOLIDAY"],
      ["04:00", "premarket", "TRADING"],
      ["09:29", "premarket", "TRADING"],
      ["09:30", "regular", "TRADING"],
      ["12:59", "regular", "TRADING"],
      ["13:00", "postmarket", "TRADING"],
      ["16:59", "postmarket", "TRADING"],
      ["17:00", "closed", "MARKET_CLOSED"],
      ["19:59", "closed", "MARKET_CLOSED"],
      ["20:00", "closed", "MARKET_CLOSED"]
    ]
    for (const [time, session, reasonCode] of expected) {
      expect(status("2026-11-27", time), time).toMatchObject({ session, reasonCode })
    }
    expect(status("2026-11-27", "12:00")).toEqual({
      session: "regular",
      reasonCode: "TRADING",
      nextOpenTime: Z("2026-11-30T14:30:00Z"),
      nextCloseTime: fridayClose
    })
    expect(status("2026-11-27", "13:00").nextCloseTime).toBe(Z("2026-11-30T21:00:00Z"))
  })
})

describe("weekends", () => {
  it("Friday 20:00 ET -> closed (MARKET_CLOSED, then WEEKEND) until Sunday 20:00 ET -> overnight (TRADING)", () => {
    const monday = { nextOpenTime: Z("2026-11-23T14:30:00Z"), nextCloseTime: Z("2026-11-23T21:00:00Z") }
    expect(status("2026-11-20", "19:59").session).toBe("postmarket")
    expect(status("2026-11-20", "20:00")).toEqual({ session: "closed", reasonCode: "MARKET_CLOSED", ...monday })
    expect(status("2026-11-20", "23:59")).toEqual({ session: "closed", reasonCode: "MARKET_CLOSED", ...monday })
    expect(status("2026-11-21", "00:00")).toEqual({ session: "closed", reasonCode: "WEEKEND", ...monday })
    expect(status("2026-11-21", "12:00")).toEqual({ session: "closed", reasonCode: "WEEKEND", ...monday })
    expect(status("2026-11-22", "04:00")).toEqual({ session: "closed", reasonCode: "WEEKEND", ...monday })
    expect(calendarStatus(1795395600000 - 1)).toEqual({ session: "closed", reasonCode: "WEEKEND", ...monday })
    expect(calendarStatus(1795395600000)).toEqual({ session: "overnight", reasonCode: "TRADING", ...monday })
    expect(status("2026-11-22", "23:59")).toEqual({ session: "overnight", reasonCode: "TRADING", ...monday })
    expect(status("2026-11-23", "03:59").session).toBe("overnight")
    expect(status("2026-11-23", "04:00").session).toBe("premarket")
  })

  it("Sunday evening before a Monday holiday (MLK 2027-01-18) stays closed (HOLIDAY); Tuesday resumes at 04:00", () => {
    const tuesday = { nextOpenTime: Z("2027-01-19T14:30:00Z"), nextCloseTime: Z("2027-01-19T21:00:00Z") }
    expect(status("2027-01-17", "19:00")).toEqual({ session: "closed", reasonCode: "WEEKEND", ...tuesday })
    expect(status("2027-01-17", "20:00")).toEqual({ session: "closed", reasonCode: "HOLIDAY", ...tuesday })
    expect(status("2027-01-18", "12:00")).toEqual({ session: "closed", reasonCode: "HOLIDAY", ...tuesday })
    expect(status("2027-01-18", "21:00")).toEqual({ session: "closed", reasonCode: "HOLIDAY", ...tuesday })
    expect(status("2027-01-19", "03:59")).toEqual({ session: "closed", reasonCode: "HOLIDAY", ...tuesday })
    expect(status("2027-01-19", "04:00")).toEqual({ session: "premarket", reasonCode: "TRADING", ...tuesday })
    expect(status("2027-01-19", "20:00").session).toBe("overnight")
  })

  it("Good Friday 2027: Thursday evening closed (HOLIDAY), Saturday WEEKEND", () => {
    expect(status("2027-03-25", "19:59").session).toBe("postmarket")
    expect(status("2027-03-25", "20:00")).toMatchObject({ session: "closed", reasonCode: "HOLIDAY" })
    expect(status("2027-03-26", "10:00")).toMatchObject({ session: "closed", reasonCode: "HOLIDAY" })
    expect(status("2027-03-27", "01:00")).toMatchObject({ session: "closed", reasonCode: "WEEKEND" })
    expect(status("2027-03-28", "20:00")).toMatchObject({ session: "overnight", reasonCode: "TRADING" })
  })
})

describe("boundaries, marketStatusAt and input checks", () => {
  it("open and close instants: regular is [open, close)", () => {
    const open = 1795185000000
    const close = 1795208400000
    expect(calendarStatus(open)).toEqual({
      session: "regular",
      reasonCode: "TRADING",
      nextOpenTime: Z("2026-11-23T14:30:00Z"),
      nextCloseTime: close
    })
    expect(calendarStatus(open - 1)).toEqual({
      session: "premarket",
      reasonCode: "TRADING",
      nextOpenTime: open,
      nextCloseTime: close
    })
    expect(calendarStatus(close - 1).session).toBe("regular")
    expect(calendarStatus(close)).toEqual({
      session: "postmarket",
      reasonCode: "TRADING",
      nextOpenTime: Z("2026-11-23T14:30:00Z"),
      nextCloseTime: Z("2026-11-23T21:00:00Z")
    })
  })

  it("marketStatusAt maps the calendar onto the seed's MarketStatus", () => {
    expect(marketStatusAt(1795395600000)).toEqual({
      openState: true,
      marketStatus: "overnight",
      reasonCode: "TRADING",
      nextOpenTime: 1795444200000,
      nextCloseTime: 1795467600000
    })
    expect(marketStatusAt(Z("2026-11-26T17:00:00Z"))).toEqual({
      openState: false,
      marketStatus: "closed",
      reasonCode: "HOLIDAY",
      nextOpenTime: Z("2026-11-27T14:30:00Z"),
      nextCloseTime: Z("2026-11-27T18:00:00Z")
    })
    expect(marketStatusAt(Z("2026-11-21T17:00:00Z"))).toMatchObject({ openState: false, reasonCode: "WEEKEND" })
  })

  it("rejects malformed input with RangeError", () => {
    expect(() => calendarStatus(Number.NaN)).toThrow(RangeError)
    expect(() => marketStatusAt(Number.POSITIVE_INFINITY)).toThrow(RangeError)
    expect(() => tradingDay("2026-02-30")).toThrow(RangeError)
    expect(() => tradingDay("2026-1-5")).toThrow(RangeError)
    expect(() => sessionsFor("tomorrow")).toThrow(RangeError)
    expect(() => etToUtc("2026-11-20", "24:00")).toThrow(RangeError)
    expect(() => holidaysOf(2026.5)).toThrow(RangeError)
  })
})

// ---------------------------------------------------------------------------------------------------
// Properties.

const FROM_2024 = Z("2024-01-01T05:00:00Z") // 2024-01-01 00:00 EST
const TO_2031 = Z("2031-01-01T05:00:00Z")
const instants2024to2030 = FastCheck.integer({ min: FROM_2024, max: TO_2031 - 1 })
const holidaySet = new Set<string>()
for (let y = 2023; y <= 2031; y++) for (const h of holidaysOf(y)) holidaySet.add(h.date)

describe("properties over 2024-2030", () => {
  it.prop(
    "nextOpenTime/nextCloseTime are the minimal regular boundaries after the instant",
    [instants2024to2030],
    ([t]) => {
      const s = calendarStatus(t)
      expect(s.nextOpenTime).toBeGreaterThan(t)
      expect(s.nextCloseTime).toBeGreaterThan(t)
      expect(s.nextOpenTime - t).toBeLessThan(5 * DAY)
      expect(calendarStatus(s.nextOpenTime).session).toBe("regular")
      expect(calendarStatus(s.nextOpenTime - 1).session).not.toBe("regular")
      expect(calendarStatus(s.nextCloseTime - MINUTE).session).toBe("regular")
      expect(calendarStatus(s.nextCloseTime).session).not.toBe("regular")
      expect(nextOpenTime(t)).toBe(s.nextOpenTime)
      expect(nextCloseTime(t)).toBe(s.nextCloseTime)

      // nextOpenTime is the open of its ET date, and no regular session starts in (t, nextOpenTime).
      const openDate = etDateOf(s.nextOpenTime)
      expect(tradingDay(openDate)?.open).toBe(s.nextOpenTime)
      for (let d = etDateOf(t); d <= openDate; d = addDays(d, 1)) {
        const day = tradingDay(d)
        if (day !== undefined && day.open > t) expect(day.open).toBeGreaterThanOrEqual(s.nextOpenTime)
      }
      // nextCloseTime closes the current regular session, or the session that opens at nextOpenTime.
      if (s.session === "regular") {
        expect(tradingDay(etDateOf(t))?.close).toBe(s.nextCloseTime)
        expect(s.nextCloseTime).toBeLessThan(s.nextOpenTime)
      } else {
        expect(tradingDay(openDate)?.close).toBe(s.nextCloseTime)
      }
    },
    { fastCheck: { numRuns: 3000 } }
  )

  it.prop(
    "Saturdays and full holidays are closed; Sunday is closed outside 20:00-24:00 ET",
    [instants2024to2030],
    ([t]) => {
      const { date, minutes, weekday } = et(t)
      const s = calendarStatus(t)
      expect(s.session === "closed").toBe(s.reasonCode !== "TRADING")
      if (weekday === "Sat") expect(s).toMatchObject({ session: "closed", reasonCode: "WEEKEND" })
      if (holidaySet.has(date)) expect(s).toMatchObject({ session: "closed", reasonCode: "HOLIDAY" })
      if (weekday === "Sun") {
        const mondayTrades = !holidaySet.has(addDays(date, 1))
        expect(s.session).toBe(minutes >= 20 * 60 && mondayTrades ? "overnight" : "closed")
      }
      if (weekday === "Fri" && minutes >= 20 * 60 && !holidaySet.has(date)) {
        expect(s).toMatchObject({ session: "closed", reasonCode: "MARKET_CLOSED" })
      }
    },
    { fastCheck: { numRuns: 3000 } }
  )

  // An independent oracle for 2025-2028: ET wall clock from a separate Intl formatter, closures and early
  // closes from the domain.md §1.2 table (not from the module's rules).
  const oracle = (t: number): { session: UsSession; reasonCode: CalendarReason } => {
    const { date, minutes } = et(t)
    const prev = addDays(date, -1)
    const next = addDays(date, 1)
    const trades = (d: string) => !isWeekendDate(d) && !tableHolidays.has(d)
    const early = tableEarly.has(date)
    let session: UsSession = "closed"
    if (minutes >= 20 * 60) session = trades(next) && !tableHolidays.has(date) ? "overnight" : "closed"
    else if (minutes < 4 * 60) session = trades(date) && !tableHolidays.has(prev) ? "overnight" : "closed"
    else if (!trades(date)) session = "closed"
    else if (minutes < 9 * 60 + 30) session = "premarket"
    else if (minutes < (early ? 13 : 16) * 60) session = "regular"
    else if (minutes < (early ? 17 : 20) * 60) session = "postmarket"
    if (session !== "closed") return { session, reasonCode: "TRADING" }
    const holidayish =
      tableHolidays.has(date) ||
      (minutes >= 20 * 60 && tableHolidays.has(next)) ||
      (minutes < 4 * 60 && trades(date) && tableHolidays.has(prev))
    if (holidayish) return { session, reasonCode: "HOLIDAY" }
    return { session, reasonCode: isWeekendDate(date) ? "WEEKEND" : "MARKET_CLOSED" }
  }

  it.prop(
    "session and reasonCode match an independent table-driven oracle (2025-2028)",
    [FastCheck.integer({ min: Z("2025-01-01T05:00:00Z"), max: Z("2028-12-30T05:00:00Z") })],
    ([t]) => {
      const s = calendarStatus(t)
      expect({ session: s.session, reasonCode: s.reasonCode }).toEqual(oracle(t))
    },
    { fastCheck: { numRuns: 4000 } }
  )

  it("the oracle agrees at every session boundary of 2025-2028 (±1 ms)", () => {
    let checked = 0
    for (const year of TABLE_YEARS) {
      for (const date of datesOfYear(year)) {
        for (const time of ["00:00", "04:00", "09:30", "13:00", "16:00", "17:00", "20:00"]) {
          const t = at(date, time)
          if (t >= Z("2028-12-30T05:00:00Z")) continue
          for (const x of [t - 1, t]) {
            const s = calendarStatus(x)
            expect({ session: s.session, reasonCode: s.reasonCode }, `${date} ${time} ${x - t}`).toEqual(oracle(x))
            checked++
          }
        }
      }
    }
    expect(checked).toBeGreaterThan(20_000)
  })
})
