import { HttpApiBuilder, HttpServer, HttpServerRequest } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { EventStreams } from "./EventStreams.js"

export const EventsHttpLive = HttpApiBuilder.group(Api, "events", (handlers) =>
  Effect.gen(function* () {
    const streams = yield* EventStreams
    return handlers.handle("stream", ({ headers, urlParams }) =>
      Effect.gen(function* () {
        const user = yield* CurrentUser
        const request = yield* HttpServerRequest.HttpServerRequest
        return yield* streams.open(user, headers["last-event-id"] ?? urlParams.lastEventId, request)
      })
    )
  })
).pipe(Layer.provide(AuthenticationLive))

/**
 * Ends every event stream when the service stops, before the HTTP server waits for its connections
 * to close: built after the server (it needs it), so its finalizer runs first.
 */
export const CloseEventStreamsFirst = Layer.scopedDiscard(
  Effect.gen(function* () {
    yield* HttpServer.HttpServer
    const streams = yield* EventStreams
    yield* Effect.addFinalizer(() => streams.closeAll)
  })
)
