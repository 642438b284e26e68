/**
 * Waiting in real time for something another process (or a background fiber) does. A slow machine
 * makes a wait longer, never a test red: the bound is generous, and only a wait that can never end
 * (the behaviour under test is broken) reaches it, then the test fails naming what it awaited and
 * what it saw last. The pauses are real time also under the TestClock, where a background fiber's
 * real I/O (a database write) is still something to wait for.
 */
import { Duration, Effect, Either, TestServices } from "effect"

export interface WaitOptions {
  /** Pause between two looks. */
  readonly every?: Duration.DurationInput
  /** The longest wait; past it the test fails. */
  readonly atMost?: Duration.DurationInput
  /** More to say when the wait fails, e.g. the output of the processes involved. */
  readonly explain?: () => string
}

/** The bound of a wait unless one is given: minutes, not seconds, so that only a wait that cannot end meets it. */
export const DEFAULT_WAIT = Duration.minutes(2)

const shown = (value: unknown) => {
  let text: string
  try {
    text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value))
  } catch {
    text = String(value)
  }
  return text.length > 500 ? `${text.slice(0, 500)}...` : text
}

/**
 * Looks with `observe` until `done` holds of what it sees, and answers that. A failed look counts
 * as "not yet". Dies with `waited <atMost> for <what>; last seen: ...` past the bound.
 */
export const eventually = <A, E, R>(
  what: string,
  observe: Effect.Effect<A, E, R>,
  done: (seen: A) => boolean,
  options: WaitOptions = {}
): Effect.Effect<A, never, R> =>
  Effect.gen(function* () {
    const atMost = Duration.decode(options.atMost ?? DEFAULT_WAIT)
    const deadline = Date.now() + Duration.toMillis(atMost)
    for (;;) {
      const seen = yield* Effect.either(observe)
      if (Either.isRight(seen) && done(seen.right)) return seen.right
      if (Date.now() >= deadline) {
        const last = Either.isRight(seen) ? shown(seen.right) : `a failure: ${shown(seen.left)}`
        const more = options.explain === undefined ? "" : `\n${options.explain()}`
        return yield* Effect.dieMessage(`waited ${Duration.format(atMost)} for ${what}; last seen: ${last}${more}`)
      }
      yield* TestServices.provideLive(Effect.sleep(options.every ?? "100 millis"))
    }
  })

/** Waits until `observe` succeeds, and answers its value. */
export const eventuallySucceeds = <A, E, R>(what: string, observe: Effect.Effect<A, E, R>, options?: WaitOptions) =>
  eventually(what, observe, () => true, options)
