import { Effect } from "effect"

/**
 * A pause on the wall clock, whatever Clock the caller runs with: a node mines and answers in real
 * time, and a test under the TestClock (which never moves by itself) must still see it do so.
 */
export const wallClockPause = (ms: number) =>
  Effect.async<void>((resume) => {
    const timer = setTimeout(() => resume(Effect.void), ms)
    return Effect.sync(() => clearTimeout(timer))
  })
