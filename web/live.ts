/**
 * The live event stream (`GET /me/events`), the one place the app reads it: screens subscribe with
 * `onLiveEvent` and never poll. It is the typed client's reader (`eventStream` in src/Client.ts:
 * `fetch` with the bearer token in the Authorization header, each event decoded with the API's
 * schemas) which resumes by itself after a dropped connection with `Last-Event-ID`, so every event
 * arrives once. Events: `ready` first (the identity-check state, the card's balance), then `kyc`,
 * `payment`, `refill`, `decision` and `strategy` as changes commit.
 *
 * When the reader gives up: a refused token or a sign-out elsewhere ends the session; a position
 * the service no longer keeps (410) makes the screens re-read what they show and the stream start
 * afresh; a stream replaced by the account's newer ones (too many open tabs) says so.
 */
import { FetchHttpClient } from "@effect/platform"
import { signal } from "@preact/signals"
import { Effect, Fiber, Stream } from "effect"
import { type EventStreamError, eventStream, type StreamEvent } from "../src/Client.js"
import { reconnections } from "./connection.js"

/** An event that carries news (the stream's own `close` is handled here). */
export type LiveEvent = Exclude<StreamEvent, { readonly event: "close" }>

/**
 * off: signed out; connecting: waiting for `ready`; open: events arrive; replaced: this tab's
 * stream was closed for the account's newer ones.
 */
export type LiveState = "off" | "connecting" | "open" | "replaced"

export const liveState = signal<LiveState>("off")

const listeners = new Set<(event: LiveEvent) => void>()

/** Calls `listener` with every event until the returned function is called. */
export const onLiveEvent = (listener: (event: LiveEvent) => void) => {
  listeners.add(listener)
  return () => {
    listeners.delete(listener)
  }
}

const dispatch = (event: LiveEvent) => {
  for (const listener of listeners) listener(event)
}

/** Codes and close reasons after which the session's token no longer works. */
const SIGNED_OUT = new Set(["UNAUTHORIZED", "signed-out", "session-expired"])

let running: Fiber.RuntimeFiber<void, never> | undefined

const follow = (token: string, onSignedOut: () => void): Effect.Effect<void> =>
  eventStream({ baseUrl: location.origin, token }).pipe(
    Stream.runForEach((event) =>
      Effect.sync(() => {
        if (event.event === "close") {
          // The reader reconnects after a shutdown; a final close ends it with an error below.
          liveState.value = "connecting"
          return
        }
        if (event.event === "ready") liveState.value = "open"
        dispatch(event)
      })
    ),
    Effect.catchAll((error: EventStreamError) => {
      if (error.code !== undefined && SIGNED_OUT.has(error.code)) return Effect.sync(onSignedOut)
      if (error.code === "replaced") return Effect.sync(() => (liveState.value = "replaced"))
      if (error.status === 410) {
        // The position is gone: the screens re-read their data, and a new stream starts from now.
        return Effect.zipRight(
          Effect.sync(() => {
            liveState.value = "connecting"
            reconnections.value += 1
          }),
          Effect.suspend(() => follow(token, onSignedOut))
        )
      }
      return Effect.sync(() => (liveState.value = "connecting"))
    }),
    Effect.provide(FetchHttpClient.layer)
  )

/** Opens the signed-in user's stream; `onSignedOut` runs when the service refuses the token. */
export const startLive = (token: string, onSignedOut: () => void) => {
  stopLive()
  liveState.value = "connecting"
  running = Effect.runFork(follow(token, onSignedOut))
}

/** Closes the stream (sign-out). */
export const stopLive = () => {
  if (running !== undefined) Effect.runFork(Fiber.interrupt(running))
  running = undefined
  liveState.value = "off"
}
