/** Reading a user's event stream in tests, with the card app's own reader (src/events/EventStreamClient.ts). */
import { FetchHttpClient } from "@effect/platform"
import { Duration, Effect, type Either, Fiber, Schedule, Stream } from "effect"
import type { StreamEvent } from "../../src/events/Api.js"
import { type EventStreamError, type EventStreamOptions, eventStream } from "../../src/events/EventStreamClient.js"

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
  /** Waits for the stream's end: `Left` with the reader's error, or `Right` when it just ended. */
  readonly ended: Effect.Effect<Either.Either<void, EventStreamError>>
  readonly stop: Effect.Effect<void>
}

/** Opens the user's stream (on the test server unless `baseUrl` says otherwise) and keeps reading it. */
export const readEvents = (options: Partial<EventStreamOptions> & { readonly token: string }) =>
  Effect.gen(function* () {
    const received: Array<StreamEvent> = []
    const fiber = yield* eventStream({ baseUrl: "", ...options }).pipe(
      Stream.runForEach((event) => Effect.sync(() => received.push(event))),
      Effect.either,
      // A URL of its own (a proxy, another replica): fetch, as a browser reads it.
      options.baseUrl?.startsWith("http") ? Effect.provide(FetchHttpClient.layer) : (read) => read,
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
