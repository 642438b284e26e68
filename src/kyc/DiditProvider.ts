/**
 * Didit (hosted identity verification) as the identity provider, `KYC_PROVIDER=didit`.
 *
 * - Session: `POST {DIDIT_BASE_URL}/v3/session/` with header `x-api-key` and body
 *   `{ workflow_id, vendor_data: <user address>, callback: <return URL> }`; the answer's
 *   `session_id` and `url` are kept. Didit sends the person back to `callback`.
 * - Decision: `GET {DIDIT_BASE_URL}/v3/session/{id}/decision/` (header `x-api-key`): the session
 *   `status` and the ID verification's `full_name` / `first_name` + `last_name` and
 *   `document_number` (read from `id_verifications[]`, or the older singular `id_verification`).
 * - Webhooks (`POST /kyc/webhook/didit`, configure this URL in Didit's console): `X-Signature` is
 *   the hex HMAC-SHA256 of the raw body with `DIDIT_WEBHOOK_SECRET`, `X-Timestamp` (unix seconds)
 *   must be within 5 minutes. Only `status.updated` events move a session; the delivery id is the
 *   SHA-256 of the raw body, so a retried identical delivery is processed once.
 *
 * Status mapping: Not Started, In Progress, In Review, Resubmitted, Awaiting User -> pending;
 * Approved -> approved; Declined -> declined; Expired, Abandoned, Kyc Expired -> expired (the
 * user's state goes back to none). Anything else is ignored.
 */
import { FetchHttpClient, HttpClient, HttpClientRequest, HttpClientResponse } from "@effect/platform"
import { Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import { BadRequest } from "../http/ApiError.js"
import { KycProviderFailed, WebhookSignatureInvalid, WebhookTimestampStale } from "./Api.js"
import type { VerifiedDocument } from "./Document.js"
import { type DiditSettings, KycConfig } from "./KycConfig.js"
import { KycProvider, type SessionUpdate } from "./KycProvider.js"
import type { SessionStatus } from "./KycState.js"
import { bodyDigest, verifyDidit } from "./Webhook.js"

const REQUEST_TIMEOUT = "10 seconds"

const STATUS: ReadonlyMap<string, SessionStatus> = new Map([
  ["Not Started", "pending"],
  ["In Progress", "pending"],
  ["In Review", "pending"],
  ["Resubmitted", "pending"],
  ["Awaiting User", "pending"],
  ["Approved", "approved"],
  ["Declined", "declined"],
  ["Expired", "expired"],
  ["Abandoned", "expired"],
  ["Kyc Expired", "expired"]
])

/** Didit's status strings (exact, case and spaces matter) onto ours; undefined when unknown. */
export const diditStatus = (status: string): SessionStatus | undefined => STATUS.get(status)

const OptionalText = Schema.optional(Schema.NullOr(Schema.String))

const IdVerification = Schema.Struct({
  status: OptionalText,
  full_name: OptionalText,
  first_name: OptionalText,
  last_name: OptionalText,
  document_number: OptionalText
})
type IdVerification = typeof IdVerification.Type

const DiditDecision = Schema.Struct({
  session_id: Schema.optional(Schema.String),
  status: Schema.String,
  id_verifications: Schema.optional(Schema.NullOr(Schema.Array(IdVerification))),
  id_verification: Schema.optional(Schema.NullOr(IdVerification))
})

const DiditSession = Schema.Struct({ session_id: Schema.String, url: Schema.String })

const DiditWebhook = Schema.Struct({
  session_id: Schema.optional(Schema.String),
  status: Schema.optional(Schema.String),
  webhook_type: Schema.optional(Schema.String),
  timestamp: Schema.optional(Schema.Number),
  created_at: Schema.optional(Schema.Number),
  decision: Schema.optional(
    Schema.NullOr(
      Schema.Struct({
        id_verifications: Schema.optional(Schema.NullOr(Schema.Array(IdVerification))),
        id_verification: Schema.optional(Schema.NullOr(IdVerification))
      })
    )
  )
})

const present = (text: string | null | undefined): text is string => typeof text === "string" && text.trim() !== ""

/** The verified name and document number of the first ID verification that has both. */
export const documentOf = (decision: {
  readonly id_verifications?: ReadonlyArray<IdVerification> | null | undefined
  readonly id_verification?: IdVerification | null | undefined
}): Option.Option<VerifiedDocument> => {
  const candidates = [
    ...(decision.id_verifications ?? []),
    ...(decision.id_verification ? [decision.id_verification] : [])
  ]
  for (const candidate of candidates) {
    const fullName = present(candidate.full_name)
      ? candidate.full_name
      : [candidate.first_name, candidate.last_name].filter(present).join(" ")
    if (present(fullName) && present(candidate.document_number)) {
      return Option.some({ fullName: fullName.trim(), documentNumber: Redacted.make(candidate.document_number) })
    }
  }
  return Option.none()
}

/** Seconds or milliseconds since epoch, as ms. */
const toMs = (value: number) => (value > 1e11 ? value : value * 1000)

const parseJson = (body: Uint8Array): unknown => {
  try {
    return JSON.parse(Buffer.from(body).toString("utf8"))
  } catch {
    return undefined
  }
}

const makeDiditProvider = (settings: DiditSettings) =>
  Effect.gen(function* () {
    const http = yield* HttpClient.HttpClient
    const secret = Redacted.value(settings.webhookSecret)
    const withKey = HttpClientRequest.setHeaders({
      "x-api-key": Redacted.value(settings.apiKey),
      accept: "application/json"
    })

    /** Any transport, status or shape failure is one opaque 502; the log says what, never a secret. */
    const call = <A, I>(what: string, request: HttpClientRequest.HttpClientRequest, schema: Schema.Schema<A, I>) =>
      http.execute(withKey(request)).pipe(
        Effect.flatMap(HttpClientResponse.filterStatusOk),
        Effect.flatMap(HttpClientResponse.schemaBodyJson(schema)),
        Effect.scoped,
        Effect.timeout(REQUEST_TIMEOUT),
        Effect.tapError((error) =>
          Effect.logWarning(
            `Didit ${what} failed: ${error._tag}${
              error._tag === "ResponseError" ? ` (HTTP ${error.response.status})` : ""
            }`
          )
        ),
        Effect.mapError(() => new KycProviderFailed({ error: "the identity provider failed; try again" })),
        Effect.withSpan(`Didit.${what}`, { attributes: { "kyc.provider": "didit" } })
      )

    return KycProvider.of({
      name: "didit",
      createSession: ({ address, returnUrl }) =>
        call(
          "createSession",
          HttpClientRequest.post(`${settings.baseUrl}/v3/session/`).pipe(
            HttpClientRequest.bodyUnsafeJson({
              workflow_id: settings.workflowId,
              vendor_data: address,
              callback: returnUrl
            })
          ),
          DiditSession
        ).pipe(Effect.map((session) => ({ sessionId: session.session_id, url: session.url }))),

      getSession: (sessionId) =>
        call(
          "getDecision",
          HttpClientRequest.get(`${settings.baseUrl}/v3/session/${encodeURIComponent(sessionId)}/decision/`),
          DiditDecision
        ).pipe(
          Effect.map((decision) => ({
            // An unknown status is reported as pending: nothing moves until Didit says more.
            status: diditStatus(decision.status) ?? "pending",
            document: documentOf(decision)
          }))
        ),

      verifyWebhook: (body, headers, nowMs) =>
        Effect.gen(function* () {
          const json = parseJson(body)
          const bodyTimestamp =
            typeof json === "object" && json !== null && typeof (json as { timestamp?: unknown }).timestamp === "number"
              ? toMs((json as { timestamp: number }).timestamp)
              : undefined
          const verdict = verifyDidit({ secret, body, headers, nowMs, bodyTimestampMs: bodyTimestamp })
          if (verdict === "bad-signature") {
            return yield* new WebhookSignatureInvalid({ error: "the webhook signature does not match its body" })
          }
          if (verdict === "stale") {
            return yield* new WebhookTimestampStale({ error: "the webhook timestamp is more than 5 minutes from now" })
          }
          const event = Schema.decodeUnknownEither(DiditWebhook)(json)
          if (Either.isLeft(event))
            return yield* new BadRequest({ error: "the Didit event is not a JSON object we understand" })
          const { session_id, status, webhook_type, timestamp, created_at, decision } = event.right
          const mapped = status === undefined ? undefined : diditStatus(status)
          const relevant =
            (webhook_type === undefined || webhook_type === "status.updated") &&
            session_id !== undefined &&
            mapped !== undefined
          const update: Option.Option<SessionUpdate> = relevant
            ? Option.some({
                sessionId: session_id,
                status: mapped,
                occurredAt: toMs(timestamp ?? created_at ?? nowMs),
                document: decision ? documentOf(decision) : Option.none()
              })
            : Option.none()
          return { deliveryId: bodyDigest(body), update }
        })
    })
  })

export const DiditProviderLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const { didit } = yield* KycConfig
    if (Option.isNone(didit)) return yield* Effect.dieMessage("DiditProviderLive needs KYC_PROVIDER=didit settings")
    return Layer.effect(KycProvider, makeDiditProvider(didit.value))
  })
).pipe(Layer.provide(FetchHttpClient.layer))
