/**
 * The card app's reader of `GET /me/events`, for Node and browsers alike: a `fetch`-based request
 * (through the platform `HttpClient`, e.g. `FetchHttpClient.layer`) with the bearer token in the
 * Authorization header, the pure SSE parser, and each event decoded with the API's own schemas.
 *
 *     const events = eventStream({ baseUrl, token })
 *     yield* events.pipe(
 *       Stream.takeUntil((event) => event.event === "kyc" && event.data.kyc === "approved"),
 *       Stream.runDrain
 *     )
 *
 * It resumes by itself: after a dropped connection, a server shutting down or an idle stream's end
 * it reconnects after the server's `retry:` delay (or a refusal's `Retry-After`, a 429 or 503) with
 * `Last-Event-ID` = the last id received, so the events arrive once each, in order, across
 * reconnections. It ends with an `EventStreamError` when reconnecting cannot
 * help: the token no longer works (401, a `close` for sign-out or expiry), the position is gone
 * (410: re-read the resources and open a new stream without `lastEventId`), or the server replaced
 * this stream by a newer one of the same user.
 */
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Effect, Option, Schema, Stream } from "effect"
import { StreamEvent } from "./Api.js"
import { type SseEvent, SseParser } from "./Sse.js"

export class EventStreamError extends Schema.TaggedError<EventStreamError>()("EventStreamError", {
  message: Schema.String,
  /** The HTTP status refusing the stream, when it was refused. */
  status: Schema.optional(Schema.Number),
  /** The error's `code` (`EVENT_ID_EXPIRED`, `UNAUTHORIZED`, ...) or the `close` reason. */
  code: Schema.optional(Schema.String)
}) {}

/** The connection dropped or was refused for a while: reconnecting may help. */
class Disconnected extends Schema.TaggedError<Disconnected>()("Disconnected", {}) {}

export interface EventStreamOptions {
  /** The service's base URL, e.g. `http://localhost:3000` ("" with a client already pointed at it). */
  readonly baseUrl: string
  readonly token: string
  /** Resume after this event id (the last `id` received before); absent: from now on. */
  readonly lastEventId?: number
  /** Reconnect and resume when the connection drops (default true). */
  readonly reconnect?: boolean
}

/** Close reasons after which reconnecting is pointless. */
const FINAL_CLOSE = new Set(["signed-out", "session-expired", "replaced"])
/** Statuses worth another try later (the replica is busy or shutting down, a gateway hiccup). */
const TRANSIENT_STATUS = new Set([429, 502, 503, 504])
const DEFAULT_RETRY_MS = 2_000

const decodeEvent = Schema.decodeUnknown(StreamEvent)

/** A parsed SSE event as a `StreamEvent`; none for an event this client does not know (a newer server). */
const toStreamEvent = (sse: SseEvent) =>
  Effect.gen(function* () {
    if (!StreamEvent.members.some((member) => member.fields.event.literals[0] === sse.event)) {
      return Option.none<StreamEvent>()
    }
    const data = yield* Effect.try(() => JSON.parse(sse.data) as unknown)
    const frame = sse.event === "close" ? { event: sse.event, data } : { event: sse.event, id: sse.lastEventId, data }
    return Option.some(yield* decodeEvent(frame))
  }).pipe(
    Effect.mapError(
      (cause) => new EventStreamError({ message: `a malformed ${sse.event} event: ${String(cause).slice(0, 300)}` })
    )
  )

export const eventStream = (
  options: EventStreamOptions
): Stream.Stream<StreamEvent, EventStreamError, HttpClient.HttpClient> => {
  let lastEventId = options.lastEventId
  let retryMs = DEFAULT_RETRY_MS
  /** A refusal's `Retry-After`, for the next reconnection only. */
  let refusedForMs: number | undefined

  /** One connection's events; ends with the connection. */
  const connection = Stream.unwrapScoped(
    Effect.gen(function* () {
      const client = yield* HttpClient.HttpClient
      const request = HttpClientRequest.get(`${options.baseUrl}/me/events`).pipe(
        HttpClientRequest.bearerToken(options.token),
        HttpClientRequest.setHeader("accept", "text/event-stream"),
        lastEventId === undefined
          ? (unchanged) => unchanged
          : HttpClientRequest.setHeader("last-event-id", String(lastEventId))
      )
      const response = yield* client.execute(request).pipe(Effect.mapError(() => new Disconnected()))
      if (response.status !== 200) {
        if (TRANSIENT_STATUS.has(response.status)) {
          const retryAfter = Number(response.headers["retry-after"])
          if (Number.isFinite(retryAfter) && retryAfter > 0) refusedForMs = retryAfter * 1000
          return yield* new Disconnected()
        }
        const body = yield* response.json.pipe(Effect.orElseSucceed(() => ({})))
        const { code, error } = body as { readonly code?: unknown; readonly error?: unknown }
        return yield* new EventStreamError({
          message: typeof error === "string" ? error : `the stream was refused with HTTP ${response.status}`,
          status: response.status,
          ...(typeof code === "string" ? { code } : {})
        })
      }
      const parser = new SseParser()
      return response.stream.pipe(
        Stream.mapError(() => new Disconnected()),
        Stream.decodeText(),
        Stream.mapConcat((text) => parser.push(text)),
        Stream.mapEffect(toStreamEvent),
        Stream.filterMap((event) => event),
        Stream.tap((event) =>
          Effect.sync(() => {
            retryMs = parser.retry ?? retryMs
            if (event.event !== "close") lastEventId = event.id
          })
        )
      )
    })
  ).pipe(
    Stream.catchTag("Disconnected", () => Stream.empty),
    Stream.flatMap((event) =>
      event.event === "close" && FINAL_CLOSE.has(event.data.reason)
        ? Stream.concat(
            Stream.succeed(event),
            Stream.fail(new EventStreamError({ message: event.data.message, code: event.data.reason }))
          )
        : Stream.succeed(event)
    )
  )

  // One connection after another (without `reconnect`, one), each after the first waiting the
  // server's delay; a final close or a refusal fails the whole stream.
  let connections = 0
  return Stream.repeatEffectOption(
    Effect.suspend(() =>
      connections++ > 0 && options.reconnect === false ? Effect.fail(Option.none()) : Effect.succeed(connection)
    )
  ).pipe(
    Stream.zipWithIndex,
    Stream.flatMap(
      ([stream, index]) =>
        index === 0
          ? stream
          : Stream.concat(
              Stream.fromEffect(
                Effect.suspend(() => {
                  const waitMs = refusedForMs ?? retryMs
                  refusedForMs = undefined
                  return Effect.sleep(waitMs)
                })
              ).pipe(Stream.drain),
              stream
            ),
      { concurrency: 1 }
    )
  )
}
