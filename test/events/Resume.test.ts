/** Where a stream starts and what it sends next: never an event skipped, never one twice. */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { nextRun, startPoint } from "../../src/events/Resume.js"

/** The ids stored for a user: 1..last with the oldest pruned (ids below `kept`), maybe a hole. */
const stored = FastCheck.record({
  last: FastCheck.integer({ min: 0, max: 60 }),
  pruned: FastCheck.integer({ min: 0, max: 60 }),
  hole: FastCheck.option(FastCheck.integer({ min: 1, max: 60 }), { nil: undefined })
}).map(({ last, pruned, hole }) =>
  Array.from({ length: last }, (_, i) => i + 1).filter((id) => id > Math.min(pruned, last) && id !== hole)
)

describe("startPoint", () => {
  it("without Last-Event-ID: from the newest event on", () => {
    expect(startPoint(undefined, 0, false)).toEqual({ _tag: "From", after: 0 })
    expect(startPoint(undefined, 42, false)).toEqual({ _tag: "From", after: 42 })
  })

  it.prop(
    "with one: from it when the next event is kept (or none followed), expired when it was pruned, unknown when newer",
    [FastCheck.integer({ min: 0, max: 100 }), FastCheck.integer({ min: 0, max: 100 }), FastCheck.boolean()],
    ([requested, last, nextKept]) => {
      const start = startPoint(requested, last, nextKept)
      if (requested > last) expect(start).toEqual({ _tag: "Unknown" })
      else if (requested === last || nextKept) expect(start).toEqual({ _tag: "From", after: requested })
      else expect(start).toEqual({ _tag: "Expired" })
    }
  )
})

describe("nextRun", () => {
  it.prop(
    "sends exactly cursor+1, cursor+2, ... as far as they are there; a missing next event is a gap",
    [stored, FastCheck.integer({ min: 0, max: 60 }), FastCheck.integer({ min: 0, max: 60 })],
    ([ids, cursor, readAfter]) => {
      // Rows as read after some position at most the cursor.
      const from = Math.min(readAfter, cursor)
      const rows = ids.filter((id) => id > from).map((id) => ({ id }))
      const { run, gap } = nextRun(cursor, rows)
      expect(run.map((row) => row.id)).toEqual(run.map((_, i) => cursor + 1 + i))
      const following = cursor + run.length + 1
      const present = rows.some((row) => row.id === following)
      expect(present).toBe(false)
      // A gap exactly when some stored event after the cursor could not be reached.
      expect(gap).toBe(rows.some((row) => row.id > following))
    },
    { fastCheck: { numRuns: 1000 } }
  )

  it.prop(
    "streaming a user's events page by page, from any start, sends each id once, in order",
    [
      FastCheck.integer({ min: 0, max: 80 }),
      FastCheck.integer({ min: 1, max: 7 }),
      FastCheck.integer({ min: 0, max: 80 })
    ],
    ([last, page, start]) => {
      const cursor0 = Math.min(start, last)
      let cursor = cursor0
      const sent: Array<number> = []
      for (let reads = 0; reads < 200 && cursor < last; reads++) {
        const rows = Array.from({ length: last }, (_, i) => ({ id: i + 1 }))
          .filter((row) => row.id > cursor)
          .slice(0, page)
        const { run, gap } = nextRun(cursor, rows)
        expect(gap).toBe(false)
        for (const row of run) sent.push(row.id)
        cursor = run.length === 0 ? cursor : run[run.length - 1]!.id
      }
      expect(sent).toEqual(Array.from({ length: last - cursor0 }, (_, i) => cursor0 + 1 + i))
    }
  )
})
