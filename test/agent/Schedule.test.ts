import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { hashOf, phaseOf, sliceCount, sliceWindow } from "../../src/agent/Schedule.js"

const cardId = fc.string({ minLength: 1, maxLength: 40 })
const intervalMs = fc.integer({ min: 1, max: 86_400_000 })
const instant = fc.integer({ min: 100_000_000_000, max: 4_000_000_000_000 })
const slicing = fc.integer({ min: 0, max: 12 }).map((n) => 2 ** n)

/** A card's hash and its slice's window closed by `dueBy`. */
const windowOf = (id: string, slices: number, dueBy: number, interval: number, spread: number) => {
  const hash = hashOf(id)
  return { hash, window: sliceWindow(Math.floor((hash * slices) / 2 ** 32), slices, dueBy, interval, spread) }
}

describe("the agent's schedule", () => {
  it("a card's slice holds its hash, and its due time in the slice's last closed window is on its own grid", () =>
    fc.assert(
      fc.property(
        cardId,
        slicing,
        intervalMs,
        fc.double({ min: 0, max: 1, noNaN: true }),
        instant,
        (id, slices, interval, share, dueBy) => {
          const spread = Math.floor(share * interval)
          const { hash, window } = windowOf(id, slices, dueBy, interval, spread)
          expect(hash).toBeGreaterThanOrEqual(window.from)
          expect(hash).toBeLessThan(window.to)
          // The window: opened before its card's due times, closed by dueBy and the last one to.
          const due = window.base + phaseOf(id, spread)
          expect(due).toBeGreaterThanOrEqual(window.opens)
          expect(due).toBeLessThanOrEqual(window.closes)
          expect(window.closes).toBeLessThanOrEqual(dueBy)
          expect(window.closes).toBeGreaterThan(dueBy - interval)
          expect((((due - phaseOf(id, spread)) % interval) + interval) % interval).toBe(0)
        }
      )
    ))

  it("every instant until the next window closes leads to the same window: one claim per slice and interval", () =>
    fc.assert(
      fc.property(
        slicing,
        intervalMs,
        instant,
        fc.double({ min: 0, max: 1, noNaN: true }),
        (slices, interval, dueBy, f) => {
          const slice = Math.floor(f * slices * 0.999)
          const window = sliceWindow(slice, slices, dueBy, interval, interval)
          const later = window.closes + Math.floor(f * (interval - 1))
          expect(sliceWindow(slice, slices, later, interval, interval)).toEqual(window)
          expect(sliceWindow(slice, slices, window.closes + interval, interval, interval).opens).toBe(
            window.opens + interval
          )
        }
      )
    ))

  it("the slices partition the hashes, in order of their windows", () =>
    fc.assert(
      fc.property(slicing, intervalMs, instant, (slices, interval, dueBy) => {
        const windows = Array.from({ length: slices }, (_, i) => sliceWindow(i, slices, dueBy, interval, interval))
        expect(windows[0]!.from).toBe(0)
        expect(windows[slices - 1]!.to).toBe(2 ** 32)
        for (let i = 1; i < slices; i++) expect(windows[i]!.from).toBe(windows[i - 1]!.to)
      })
    ))

  it("without a spread every card is due at the interval's start", () =>
    fc.assert(
      fc.property(cardId, slicing, intervalMs, instant, (id, slices, interval, dueBy) => {
        const { window } = windowOf(id, slices, dueBy, interval, 0)
        expect(window.opens % interval).toBe(0)
        expect(window.closes).toBe(window.opens)
        expect(phaseOf(id, 0)).toBe(0)
      })
    ))

  it("cards are cut into a power of two of slices of half a page to a page on average", () =>
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 10_000_000 }), fc.integer({ min: 1, max: 100_000 }), (cards, page) => {
        const slices = sliceCount(cards, page)
        expect(Number.isInteger(Math.log2(slices))).toBe(true)
        expect(cards / slices).toBeLessThanOrEqual(page)
        if (slices > 1) expect(cards / slices).toBeGreaterThan(page / 2)
      })
    ))

  it("10,000 cards spread evenly over the interval: each tenth holds 9-11% of them", () => {
    const counts = Array.from({ length: 10 }, () => 0)
    for (let i = 0; i < 10_000; i++) counts[Math.floor(phaseOf(`card-${i}`, 60_000) / 6_000)]! += 1
    for (const n of counts) expect(n).toBeGreaterThan(900)
    for (const n of counts) expect(n).toBeLessThan(1_100)
  })
})
