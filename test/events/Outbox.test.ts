/** A stream's outbox: bounded in bytes, handed over in order, ended once. */
import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck, Fiber } from "effect"
import { Outbox } from "../../src/events/Outbox.js"

describe("Outbox", () => {
  it.prop(
    "never holds more than its capacity (but one frame), and hands over exactly the frames it accepted, in order",
    [
      FastCheck.array(FastCheck.string({ maxLength: 50 }), { maxLength: 60 }),
      FastCheck.array(FastCheck.boolean(), { maxLength: 60 })
    ],
    ([frames, takes]) => {
      const outbox = new Outbox(64)
      const accepted: Array<string> = []
      let pending: Array<string> = []
      let handed = ""
      frames.forEach((frame, i) => {
        if (outbox.offer(frame)) {
          accepted.push(frame)
          pending.push(frame)
        }
        // Within the capacity, or a single frame larger than it.
        expect(outbox.pendingBytes <= 64 || pending.length === 1).toBe(true)
        expect(outbox.pendingBytes).toBe(Buffer.byteLength(pending.join("")))
        if (takes[i] === true && pending.length > 0) {
          handed += Effect.runSync(outbox.take) ?? ""
          pending = []
        }
      })
      outbox.end()
      handed += Effect.runSync(outbox.take) ?? ""
      expect(Effect.runSync(outbox.take)).toBeUndefined()
      expect(handed).toBe(accepted.join(""))
    }
  )

  it.effect("a waiting writer wakes on the next frame; after end it gets the last frame, then the end", () =>
    Effect.gen(function* () {
      let drained = 0
      const outbox = new Outbox(10, () => drained++)
      const waiting = yield* Effect.fork(outbox.take)
      yield* Effect.yieldNow()
      expect(outbox.offer("abc")).toBe(true)
      expect(yield* Fiber.join(waiting)).toBe("abc")
      expect(outbox.offer("0123456789")).toBe(true)
      expect(outbox.offer("x")).toBe(false)
      outbox.end("bye")
      expect(outbox.offer("late")).toBe(false)
      expect(yield* outbox.take).toBe("0123456789bye")
      expect(yield* outbox.take).toBeUndefined()
      expect(drained).toBe(2)
    })
  )
})
