/** Reading a user's event stream in tests, with the card app's own reader (src/events/EventStreamClient.ts). */
import { FetchHttpClient } from "@effect/platform"
import { Duration, Effect, type Either, Fiber, Stream } from "effect"
import type { StreamEvent } from "../../src/events/Api.js"
import { type EventStreamError, type EventStreamOptions, eventStream } from "../../src/events/EventStreamClient.js"
import { DEFAULT_WAIT, eventually } from "./wait.js"

export interface EventReader {
  /** Every event received so far, in order. */
  readonly received: () => ReadonlyArray<StreamEvent>
  /** Waits for the first event that satisfies `predicate` (see `eventually`; `what` names it). */
  readonly await: (what: string, predicate: (event: StreamEvent) => boolean) => Effect.Effect<StreamEvent>
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
      await: (what, predicate) =>
        eventually(
          `the ${what} event`,
          Effect.sync(() => received.find(predicate)),
          (found) => found !== undefined,
          { every: "20 millis", explain: () => `received: ${JSON.stringify(received).slice(-2000)}` }
        ).pipe(Effect.map((found) => found!)),
      ended: Fiber.join(fiber).pipe(
        Effect.timeoutFail({
          duration: DEFAULT_WAIT,
          onTimeout: () => new Error(`waited ${Duration.format(DEFAULT_WAIT)} for the event stream to end`)
        }),
        Effect.orDie
      ),
      stop: Fiber.interrupt(fiber).pipe(Effect.asVoid)
    }
    return reader
  })
