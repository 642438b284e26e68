/**
 * A typed client of this service for card apps and tools, derived from the HttpApi itself: every
 * endpoint is a method with its path, query, body and answer typed, and every error body decodes
 * back into its tagged error (`CardRequired`, `PaymentRequired`, ...), so callers `catchTag` them.
 *
 *     const client = yield* makeClient({ baseUrl: "http://localhost:3000", token })
 *     const me = yield* client.account.me()
 *     const order = yield* client.merchant.createOrder({ payload: { amount: "3.50", description: "Tea" } })
 *     yield* client.strategy.put({ payload: { targets: { NVDA: 0.6, SPY: 0.4 }, weeklySpendUsd: 140 } })
 *
 * It needs an `HttpClient` (FetchHttpClient.layer in Node 20+ or a browser).
 *
 * `GET /me/events` is read with `eventStream({ baseUrl, token })` (not `client.events.stream`, which
 * would wait for the end of a stream that does not end): a `Stream` of typed events that resumes by
 * itself after a dropped connection (events/EventStreamClient.ts, docs/events.md).
 */
import { HttpApiClient, HttpClient, HttpClientRequest } from "@effect/platform"
import type { Effect } from "effect"
import { Api } from "./Api.js"

export interface ClientOptions {
  /** The service's base URL, e.g. `http://localhost:3000`. */
  readonly baseUrl: string
  /** A bearer token from `POST /auth/verify`, sent on every request. */
  readonly token?: string
}

export const makeClient = (options: ClientOptions) =>
  HttpApiClient.make(Api, {
    baseUrl: options.baseUrl,
    ...(options.token === undefined
      ? {}
      : { transformClient: HttpClient.mapRequest(HttpClientRequest.bearerToken(options.token)) })
  })

export type { StreamEvent } from "./events/Api.js"
export { EventStreamError, type EventStreamOptions, eventStream } from "./events/EventStreamClient.js"

/** The client's type, for whoever keeps one around. */
export type Client = Effect.Effect.Success<ReturnType<typeof makeClient>>
