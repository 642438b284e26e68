import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { expectedSpend, forecastSpend, type Payment, spendRates } from "../../src/agent/Forecast.js"
import { localDayOf, startOfLocalDay } from "../../src/market/TimeZone.js"

const NY = "America/New_York"
const Z = Date.parse
const HOUR = 3_600_000
/** Wednesday 2026-11-25 12:00 ET: the lookback is Wed 2026-10-28 .. Tue 2026-11-24 (20 weekdays, 8 weekend days). */
const AT = Z("2026-11-25T17:00:00Z")
const LONG_AGO = Z("2025-01-01T00:00:00Z")

/** One payment at local noon (New York) on each of the given dates. */
const noonPayments = (dates: ReadonlyArray<string>, usd: number): Array<Payment> =>
  dates.map((date) => ({ at: Z(`${date}T17:00:00Z`), usd }))

/** The dates of the lookback window of AT. */
const lookback = Array.from({ length: 28 }, (_, i) => new Date(Z("2026-10-28T12:00:00Z") + i * 86_400_000))
const weekdays = lookback.filter((d) => d.getUTCDay() % 6 !== 0).map((d) => d.toISOString().slice(0, 10))
const weekend = lookback.filter((d) => d.getUTCDay() % 6 === 0).map((d) => d.toISOString().slice(0, 10))

describe("daily rates", () => {
  it("are the card's own averages per weekday and weekend day over the 28 days before today", () => {
    expect([weekdays.length, weekend.length]).toEqual([20, 8])
    const payments = [
      ...noonPayments(weekdays, 20),
      ...noonPayments(weekend, 5),
      // outside the window: today, and 29 days ago
      { at: AT - HOUR, usd: 1000 },
      { at: Z("2026-10-27T17:00:00Z"), usd: 1000 }
    ]
    expect(spendRates({ cardCreatedAt: LONG_AGO, payments }, 700, NY, AT)).toEqual({ weekdayUsd: 20, weekendUsd: 5 })
  })

  it("average over every day of the bucket, including days without payments", () => {
    const payments = [{ at: Z("2026-11-21T15:00:00Z"), usd: 40 }] // Saturday
    expect(spendRates({ cardCreatedAt: LONG_AGO, payments }, 0, NY, AT)).toEqual({ weekdayUsd: 0, weekendUsd: 5 })
  })

  it("count the days before the card existed at weeklySpendUsd / 7", () => {
    // Issued at the start of Wed 2026-11-11 (ET): Oct 28 .. Nov 10 (10 weekdays, 4 weekend days) are estimated.
    const cardCreatedAt = Z("2026-11-11T05:00:00Z")
    const after = weekdays.filter((date) => date >= "2026-11-11")
    expect(after).toHaveLength(10)
    const rates = spendRates({ cardCreatedAt, payments: noonPayments(after, 2) }, 70, NY, AT)
    expect(rates.weekdayUsd).toBeCloseTo((10 * 10 + 10 * 2) / 20, 12)
    expect(rates.weekendUsd).toBeCloseTo((4 * 10) / 8, 12)
  })

  it("count the part of the issue day before the card existed at the estimate, plus that day's payments", () => {
    // Issued Tue 2026-11-24 18:00 ET: three quarters of that day are estimated, then $6 spent.
    const cardCreatedAt = Z("2026-11-24T23:00:00Z")
    const rates = spendRates({ cardCreatedAt, payments: [{ at: Z("2026-11-25T01:00:00Z"), usd: 6 }] }, 70, NY, AT)
    expect(rates.weekdayUsd).toBeCloseTo((19 * 10 + 0.75 * 10 + 6) / 20, 12)
    expect(rates.weekendUsd).toBeCloseTo(10, 12)
  })

  it("a card issued after the decision instant is all estimate", () => {
    expect(spendRates({ cardCreatedAt: AT + HOUR, payments: [] }, 70, NY, AT)).toEqual({
      weekdayUsd: 10,
      weekendUsd: 10
    })
  })

  it("use the strategy's time zone for day boundaries", () => {
    // Fri 2026-11-20 22:00 in New York is already Saturday 04:00 in Paris.
    const payments = [{ at: Z("2026-11-21T03:00:00Z"), usd: 80 }]
    const history = { cardCreatedAt: LONG_AGO, payments }
    expect(spendRates(history, 0, NY, AT)).toEqual({ weekdayUsd: 4, weekendUsd: 0 })
    expect(spendRates(history, 0, "Europe/Paris", AT)).toEqual({ weekdayUsd: 0, weekendUsd: 10 })
    // A payment at 23:30 local time on the day before the decision counts; one at 00:30 on its day does not.
    const tokyo = "Asia/Tokyo"
    const at = Z("2026-11-25T03:00:00Z") // Wed 12:00 in Tokyo
    const edge = [
      { at: Z("2026-11-24T14:30:00Z"), usd: 20 }, // Tue 23:30 JST
      { at: Z("2026-11-24T15:30:00Z"), usd: 500 } // Wed 00:30 JST
    ]
    expect(spendRates({ cardCreatedAt: LONG_AGO, payments: edge }, 0, tokyo, at).weekdayUsd).toBe(1)
  })

  it("are unaffected by the length of DST change days", () => {
    // Lookback of Wed 2026-11-25 contains Sun 2026-11-01 (25 hours); one payment late that day stays on it.
    const payments = [{ at: Z("2026-11-02T04:30:00Z"), usd: 16 }] // Sun 23:30 EST
    expect(spendRates({ cardCreatedAt: LONG_AGO, payments }, 0, NY, AT)).toEqual({ weekdayUsd: 0, weekendUsd: 2 })
  })
})

describe("spend over a window", () => {
  const rates = { weekdayUsd: 24, weekendUsd: 48 }

  it("integrates each local day's share of the window at its bucket's rate", () => {
    // Fri 12:00 ET to Mon 00:00 ET: half a weekday, two weekend days.
    expect(expectedSpend(rates, NY, Z("2026-11-20T17:00:00Z"), Z("2026-11-23T05:00:00Z"))).toBeCloseTo(108, 9)
    // Two hours on a weekday.
    expect(expectedSpend(rates, NY, Z("2026-11-24T15:00:00Z"), Z("2026-11-24T17:00:00Z"))).toBeCloseTo(2, 9)
    expect(expectedSpend(rates, NY, AT, AT)).toBe(0)
    expect(expectedSpend(rates, NY, AT, AT - HOUR)).toBe(0)
  })

  it("counts a 25-hour and a 23-hour day as one day each", () => {
    // Sun 2026-11-01 (DST ends) and Sun 2027-03-14 (DST starts) in New York.
    const fallBack = [Z("2026-11-01T04:00:00Z"), Z("2026-11-02T05:00:00Z")] as const
    const springForward = [Z("2027-03-14T05:00:00Z"), Z("2027-03-15T04:00:00Z")] as const
    expect(fallBack[1] - fallBack[0]).toBe(25 * HOUR)
    expect(springForward[1] - springForward[0]).toBe(23 * HOUR)
    expect(expectedSpend(rates, NY, ...fallBack)).toBeCloseTo(48, 9)
    expect(expectedSpend(rates, NY, ...springForward)).toBeCloseTo(48, 9)
    // Half of the 25-hour day is 12.5 hours.
    expect(expectedSpend(rates, NY, fallBack[0], fallBack[0] + 12.5 * HOUR)).toBeCloseTo(24, 9)
  })

  it("handles a zone whose midnight a DST change skips", () => {
    // America/Santiago moves from -04 to -03 at 2026-09-06 00:00 local: that day starts at 01:00 and lasts 23 h.
    const santiago = "America/Santiago"
    const day = localDayOf(Z("2026-09-06T12:00:00Z"), santiago)
    expect(startOfLocalDay(day, santiago)).toBe(Z("2026-09-06T04:00:00Z"))
    expect(startOfLocalDay(day + 1, santiago)).toBe(Z("2026-09-07T03:00:00Z"))
    expect(expectedSpend(rates, santiago, Z("2026-09-06T04:00:00Z"), Z("2026-09-07T03:00:00Z"))).toBeCloseTo(48, 9)
  })

  it.prop(
    "is additive over adjacent windows and grows by at most the higher rate per day",
    [
      FastCheck.integer({ min: Z("2026-01-01T00:00:00Z"), max: Z("2028-12-31T00:00:00Z") }),
      FastCheck.integer({ min: 0, max: 5 * 86_400_000 }),
      FastCheck.integer({ min: 0, max: 5 * 86_400_000 }),
      FastCheck.constantFrom(NY, "Europe/Paris", "Asia/Kolkata", "America/Santiago", "Pacific/Auckland", "UTC")
    ],
    ([from, first, second, zone]) => {
      const whole = expectedSpend(rates, zone, from, from + first + second)
      const parts =
        expectedSpend(rates, zone, from, from + first) + expectedSpend(rates, zone, from + first, from + first + second)
      expect(whole).toBeCloseTo(parts, 6)
      // A local day lasts at least 23 hours.
      expect(whole).toBeLessThanOrEqual((48 * (first + second)) / (23 * HOUR) + 1e-9)
      expect(whole).toBeGreaterThanOrEqual((24 * (first + second)) / (25 * HOUR) - 1e-9)
    }
  )
})

it("forecastSpend gives the rates at `from` and the spend until `to`", () => {
  const history = { cardCreatedAt: LONG_AGO, payments: noonPayments(weekdays, 20) }
  const forecast = forecastSpend(history, 0, NY, AT, AT + 12 * HOUR)
  expect(forecast.rates).toEqual({ weekdayUsd: 20, weekendUsd: 0 })
  expect(forecast.usd).toBeCloseTo(10, 9)
})
