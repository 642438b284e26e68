/**
 * The signed-in user's live events over HTTP: `GET /me/events`, a Server-Sent Events stream. The
 * event types and their JSON `data` are schemas here, in the OpenAPI document (`EventStreamFrame`)
 * and in the typed client (`StreamEvent`), so a card app decodes each event it receives.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { DecisionItem, Strategy } from "../agent/Api.js"
import { Authentication } from "../auth/Api.js"
import { CardAuthorization, CardMoney } from "../authorizations/Api.js"
import { ActivityItem } from "../cards/Api.js"
import { Card } from "../cards/Card.js"
import { ApiError } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { KycState } from "../kyc/KycState.js"

export class EventIdExpired extends ApiError(
  "EventIdExpired",
  "EVENT_ID_EXPIRED",
  410,
  "Events after this Last-Event-ID are no longer kept (EVENTS_RETENTION, 7 days by default): re-read the " +
    "resources (GET /me, /me/activity, /strategy, /agent/decisions), then connect without Last-Event-ID."
) {}

export class EventIdUnknown extends ApiError(
  "EventIdUnknown",
  "EVENT_ID_UNKNOWN",
  410,
  "This Last-Event-ID is newer than the user's newest event (an id from another deployment or database): " +
    "re-read the resources (GET /me, /me/activity, /strategy, /agent/decisions), then connect without Last-Event-ID."
) {}

export class StreamsUnavailable extends ApiError(
  "StreamsUnavailable",
  "STREAMS_UNAVAILABLE",
  503,
  "This replica is shutting down or holds EVENTS_MAX_STREAMS streams: connect again after Retry-After."
) {}

export class TooManyStreams extends ApiError(
  "TooManyStreams",
  "TOO_MANY_STREAMS",
  429,
  "This client address (an IPv6 client: its /64) holds EVENTS_MAX_STREAMS_PER_CLIENT streams on this replica: " +
    "close one, or connect again after Retry-After."
) {}

/** An event id: per user, from 1, increasing by one with each event. */
export const EventId = Schema.Int.pipe(Schema.nonNegative()).annotations({
  description: "the user's event id: 1, 2, 3, ... in the order the changes committed"
})

/** An event id as a client sends it back (Last-Event-ID): decimal digits. */
export const EventIdText = Schema.String.pipe(
  Schema.pattern(/^[0-9]{1,15}$/, { message: () => "must be the id of an event (decimal digits)" })
)

/** How the stream stands when it opens: sent first, before anything else. */
export const ReadyEvent = Schema.Struct({
  kyc: KycState,
  cardUsd1: Schema.NullOr(Schema.Number).annotations({
    description: "the card's USD1 balance; null without a card, or when the chain did not answer in time"
  }),
  lastEventId: EventId.annotations({ description: "the id of the user's newest event when the stream opened" })
}).annotations({ identifier: "ReadyEvent", description: "The user's state when the stream opened." })

export const KycEvent = Schema.Struct({
  kyc: KycState,
  card: Schema.NullOr(Card).annotations({ description: "the card, once the check is approved (it was issued then)" })
}).annotations({ identifier: "KycEvent", description: "The identity check moved to a new state." })

export const CloseReason = Schema.Literal(
  "shutdown",
  "signed-out",
  "session-expired",
  "replaced",
  "events-expired",
  "idle"
)
export type CloseReason = typeof CloseReason.Type

export const CloseEvent = Schema.Struct({
  reason: CloseReason.annotations({
    description:
      "shutdown: reconnect (with Last-Event-ID); signed-out, session-expired: the token no longer works; " +
      "replaced: the user opened more than EVENTS_MAX_STREAMS_PER_USER streams and this was the oldest; " +
      "events-expired: reconnect with Last-Event-ID to learn what to re-read; " +
      "idle: no event for EVENTS_IDLE_TIMEOUT, reconnect with Last-Event-ID"
  }),
  message: Schema.String
}).annotations({ identifier: "CloseEvent", description: "The server ends the stream; nothing follows." })

/** The id an event carries on the wire: the `id:` field, decimal. */
const WireId = Schema.NumberFromString.pipe(Schema.int(), Schema.nonNegative()).annotations({
  description: "the `id:` field; a reconnect sends the last one received as Last-Event-ID"
})

const frame = <const Name extends string, Data extends Schema.Schema.Any>(event: Name, data: Data, about: string) =>
  Schema.Struct({ event: Schema.Literal(event), id: WireId, data }).annotations({
    identifier: `${event[0]!.toUpperCase()}${event.slice(1)}Frame`,
    description: about
  })

/** One event as a client reads it: its name, its id and its decoded JSON data. */
export const StreamEvent = Schema.Union(
  frame(
    "ready",
    ReadyEvent,
    "First on every stream. Its id is where the stream goes on from: the newest event's, or the Last-Event-ID sent."
  ),
  frame("kyc", KycEvent, "The identity check changed state; `card` once approved."),
  frame("payment", ActivityItem, "A payment by the card settled: the statement item, as GET /me/activity shows it."),
  frame("refill", ActivityItem, "The agent refilled the card: the statement item, as GET /me/activity shows it."),
  frame("decision", DecisionItem, "The agent stored a decision for the card, or one ended: as GET /agent/decisions."),
  frame("strategy", Strategy, "The card's strategy was set (by any session of the user): as GET /strategy."),
  frame(
    "authorization",
    CardAuthorization,
    "The card network asked about a payment and it was approved or declined (with its reason), or an authorization " +
      "changed (an increment, a reversal, a clearing, an expiry): as GET /card/authorizations. `availableUsd` is " +
      "what the card could spend right after the decision."
  ),
  frame(
    "money",
    CardMoney,
    "The card's money moved: a clearing was debited from the card wallet or a refund credited to it (the statement " +
      "item is then settled, with `tx`), a clearing could not be debited and is owed (the card is frozen), or what " +
      "was owed was repaid."
  ),
  Schema.Struct({ event: Schema.Literal("close"), data: CloseEvent }).annotations({
    identifier: "CloseFrame",
    description: "The server ends the stream and says why (no id)."
  })
).annotations({
  identifier: "EventStreamFrame",
  description:
    "One Server-Sent Event: `event: <event>`, `id: <id>` and one `data:` line of JSON. Comment lines (`: ping`) " +
    "are heartbeats."
})
export type StreamEvent = typeof StreamEvent.Type
export type EventType = StreamEvent["event"]

/** The types a writer stores (ready and close exist only on the wire). */
export type StoredEventType = Exclude<EventType, "ready" | "close">

/** The `text/event-stream` response is described by `EventStreamFrame` (an `AdditionalSchemas` component). */
const eventStreamResponse = <O extends { readonly responses?: Record<string, Record<string, unknown>> }>(
  operation: O
): O => ({
  ...operation,
  responses: {
    ...operation.responses,
    "200": {
      ...operation.responses?.["200"],
      description: "The user's events, as Server-Sent Events, until the server or the client ends the stream.",
      content: { "text/event-stream": { schema: { $ref: "#/components/schemas/EventStreamFrame" } } }
    }
  }
})

export class EventsApi extends HttpApiGroup.make("events")
  .add(
    HttpApiEndpoint.get("stream", "/me/events")
      .setHeaders(
        withFieldMessages(
          Schema.Struct({
            "last-event-id": Schema.optional(
              EventIdText.annotations({ description: "resume after this event (the last `id:` received)" })
            )
          })
        )
      )
      .setUrlParams(
        withFieldMessages(
          Schema.Struct({
            lastEventId: Schema.optionalWith(
              EventIdText.annotations({
                description: "the same as the Last-Event-ID header, for clients that cannot set it (the header wins)"
              }),
              { exact: true }
            )
          })
        )
      )
      .addSuccess(HttpApiSchema.Text({ contentType: "text/event-stream" }))
      .addError(EventIdExpired.wire)
      .addError(EventIdUnknown.wire)
      .addError(StreamsUnavailable.wire)
      .addError(TooManyStreams.wire)
      .annotate(OpenApi.Summary, "Live events")
      .annotate(
        OpenApi.Description,
        "The signed-in user's events as Server-Sent Events: `ready` first, then `kyc`, `payment`, `refill`, " +
          "`decision` and `strategy` as the changes commit, on whichever replica they happen. Ids increase by one " +
          "per user; reconnect with `Last-Event-ID` (or `?lastEventId=`) to receive every event after it exactly " +
          "once, then the live ones. A `: ping` comment comes every EVENTS_HEARTBEAT (15 s). The stream ends with a " +
          "`close` event (shutdown, sign-out, session expiry, more than EVENTS_MAX_STREAMS_PER_USER streams, no event " +
          "for EVENTS_IDLE_TIMEOUT), or is cut when the client reads too slowly. One client address holds at most " +
          "EVENTS_MAX_STREAMS_PER_CLIENT streams on a replica (429 TOO_MANY_STREAMS), a replica EVENTS_MAX_STREAMS (503). Browsers read it with `fetch` (the bearer token goes in the " +
          "Authorization header, never in the URL); `EventSource` cannot send it."
      )
      .annotate(OpenApi.Transform, eventStreamResponse)
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Events")
  .annotate(
    OpenApi.Description,
    "One live stream per signed-in user instead of polling: the identity check, payments, refills, the agent's " +
      "decisions and strategy changes. Resumable, across replicas (docs/events.md)."
  ) {}
