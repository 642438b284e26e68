import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import { nextDueAfter, phaseOf } from "../../src/agent/Schedule.js"

const cardId = fc.string({ minLength: 1, maxLength: 40 })
const intervalMs = fc.integer({ min: 1, max: 86_400_000 })
const instant = fc.integer({ min: 0, max: 4_000_000_000_000 })

describe("the agent's schedule", () => {
  it("a card is next due strictly after the instant, within one interval, on its own grid", () =>
    fc.assert(
      fc.property(cardId, intervalMs, instant, (id, interval, after) => {
        const due = nextDueAfter(id, after, interval, interval)
        expect(due).toBeGreaterThan(after)
        expect(due - after).toBeLessThanOrEqual(interval)
        expect((((due - phaseOf(id, interval)) % interval) + interval) % interval).toBe(0)
      })
    ))

  it("every instant of one interval leads to the same next due time: one decision per card and interval", () =>
    fc.assert(
      fc.property(cardId, intervalMs, instant, fc.double({ min: 0, max: 1, noNaN: true }), (id, interval, at, f) => {
        const due = nextDueAfter(id, at, interval, interval)
        const earlier = due - interval + Math.floor(f * (interval - 1))
        expect(nextDueAfter(id, earlier, interval, interval)).toBe(due)
      })
    ))

  it("without a spread every card is due at the interval's start", () =>
    fc.assert(
      fc.property(cardId, intervalMs, instant, (id, interval, after) => {
        expect(nextDueAfter(id, after, interval, 0) % interval).toBe(0)
      })
    ))

  it("10,000 cards spread evenly over the interval: each tenth holds 9-11% of them", () => {
    const counts = Array.from({ length: 10 }, () => 0)
    for (let i = 0; i < 10_000; i++) counts[Math.floor(phaseOf(`card-${i}`, 60_000) / 6_000)]! += 1
    for (const n of counts) expect(n).toBeGreaterThan(900)
    for (const n of counts) expect(n).toBeLessThan(1_100)
  })
})
