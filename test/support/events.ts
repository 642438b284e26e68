/** Reading a user's event stream in tests, with the card app's own reader (src/events/EventStreamClient.ts). */
import { Duration, Effect, Fiber, Schedule, Stream } from "effect"
import type { StreamEvent } from "../../src/events/Api.js"
import { type EventStreamOptions, eventStream } from "../../src/events/EventStreamClient.js"

export interface EventReader {
  /** Every event received so far, in order. */
  readonly received: () => ReadonlyArray<StreamEvent>
  /**
   * The first event after the `skip` first ones that satisfies `predicate`, waiting for it (at most
   * `within`; failing with a message naming `what`).
   */
  readonly await: (
    what: string,
    predicate: (event: StreamEvent) => boolean,
    options?: { readonly skip?: number; readonly within?: Duration.DurationInput }
  ) => Effect.Effect<StreamEvent>
  /** The stream's end: its failure, if it failed. */
  readonly ended: Effect.Effect<unknown>
  readonly stop: Effect.Effect<void>
}

/** Opens the user's stream (on the test server unless `baseUrl` says otherwise) and keeps reading it. */
export const readEvents = (options: Partial<EventStreamOptions> & { readonly token: string }) =>
  Effect.gen(function* () {
    const received: Array<StreamEvent> = []
    const fiber = yield* eventStream({ baseUrl: "", ...options }).pipe(
      Stream.runForEach((event) => Effect.sync(() => received.push(event))),
      Effect.either,
      Effect.forkScoped
    )
    const reader: EventReader = {
      received: () => received,
      await: (what, predicate, { skip = 0, within = "30 seconds" } = {}) =>
        Effect.suspend(() => {
          const found = received.slice(skip).find(predicate)
          return found === undefined ? Effect.fail("not yet") : Effect.succeed(found)
        }).pipe(
          Effect.retry(Schedule.spaced("20 millis")),
          Effect.timeoutFail({
            duration: within,
            onTimeout: () =>
              new Error(
                `no ${what} event within ${Duration.format(within)}; received: ${JSON.stringify(received).slice(-2000)}`
              )
          }),
          Effect.orDie
        ),
      ended: Fiber.join(fiber),
      stop: Fiber.interrupt(fiber).pipe(Effect.asVoid)
    }
    return reader
  })
