/**
 * Identity check over HTTP: starting a provider session (bearer), the providers' signed webhooks,
 * and the built-in sandbox provider's hosted page.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { Address } from "../chain/Address.js"
import { ApiError } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"

export class KycAlreadyApproved extends ApiError(
  "KycAlreadyApproved",
  "KYC_ALREADY_APPROVED",
  409,
  "The identity check is already approved; the card is issued."
) {}

export class KycDuplicate extends ApiError(
  "KycDuplicate",
  "KYC_DUPLICATE",
  409,
  "The identity document already holds another card; no new check can be started."
) {}

export class KycProviderFailed extends ApiError(
  "KycProviderFailed",
  "KYC_PROVIDER_ERROR",
  502,
  "The identity provider failed or did not answer in time; nothing changed, try again."
) {}

export class WebhookSignatureInvalid extends ApiError(
  "WebhookSignatureInvalid",
  "WEBHOOK_SIGNATURE_INVALID",
  401,
  "The webhook's signature headers are missing or do not match its raw body; nothing changed."
) {}

export class WebhookTimestampStale extends ApiError(
  "WebhookTimestampStale",
  "WEBHOOK_TIMESTAMP_STALE",
  401,
  "The webhook is signed but its timestamp is more than 5 minutes from now; nothing changed."
) {}

// An empty body reads as null (RequestBody.ts): the body is optional.
const KycSessionRequest = Schema.NullOr(
  Schema.Struct({
    returnUrl: Schema.optional(
      Schema.String.annotations({
        description:
          "Where the person is sent back after the provider's flow; kept only on an exact WEB_ORIGIN origin " +
          "(else APP_URL/). Sent again while the check is pending, it replaces the earlier one.",
        message: () => "must be a URL string"
      })
    )
  })
).annotations({ identifier: "KycSessionRequest" })

const KycSessionResponse = Schema.Struct({
  url: Schema.String.annotations({ description: "The identity provider's page to open" })
}).annotations({ identifier: "KycSession" })

export class KycApi extends HttpApiGroup.make("kyc")
  .add(
    HttpApiEndpoint.post("startSession", "/kyc/session")
      .setPayload(withFieldMessages(KycSessionRequest))
      .addSuccess(KycSessionResponse)
      .addError(KycAlreadyApproved.wire)
      .addError(KycDuplicate.wire)
      .addError(KycProviderFailed.wire)
      .annotate(OpenApi.Summary, "Start the identity check")
      .annotate(
        OpenApi.Description,
        "Starts the identity check (none or declined -> pending) and answers the provider URL; while pending " +
          "it answers the same session's URL, and a `returnUrl` on a WEB_ORIGIN origin replaces the earlier " +
          "one. The body may be left out. The result: a `kyc` event on GET /me/events, or poll GET /me."
      )
      // HttpApi marks every payload required; an absent body reads as null here.
      .annotate(OpenApi.Transform, (operation) => ({
        ...operation,
        requestBody: { ...operation.requestBody, required: false }
      }))
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Identity check")
  .annotate(
    OpenApi.Description,
    "The identity check (KYC) that issues the card: start it, send the person to the provider's page, then wait " +
      "for the `kyc` event on GET /me/events (or poll GET /me) until `kyc` leaves `pending`; on approval exactly " +
      "one card is issued."
  ) {}

const WebhookAck = Schema.Struct({
  received: Schema.Literal(true),
  outcome: Schema.Literal("applied", "unchanged", "duplicate", "ignored").annotations({
    description:
      "applied: the session moved; unchanged: nothing to move (e.g. a late event); duplicate: this " +
      "delivery was processed before; ignored: not an event about a session of ours"
  })
}).annotations({ identifier: "WebhookAck" })

export class KycWebhookApi extends HttpApiGroup.make("kycWebhook")
  .add(
    HttpApiEndpoint.post("webhook", "/kyc/webhook/:provider")
      .setPath(withFieldMessages(Schema.Struct({ provider: Schema.String })))
      .setPayload(
        // Documentation only (the body is read raw); a plain JSON Schema keeps the document free of
        // the shared "/schemas/unknown" id other groups' schemas may also produce.
        Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
          identifier: "KycWebhookEvent",
          jsonSchema: {
            type: "object",
            description: "The provider's JSON event, verified over its raw bytes (see docs/kyc.md)"
          }
        })
      )
      .addSuccess(WebhookAck)
      .addError(WebhookSignatureInvalid.wire)
      .addError(WebhookTimestampStale.wire)
      .addError(KycProviderFailed.wire)
      .annotate(OpenApi.Summary, "Receive an identity provider's result")
      .annotate(
        OpenApi.Description,
        "Signed result deliveries from the active identity provider (`sandbox` or `didit`). The HMAC is " +
          "checked over the raw body, the timestamp within 5 minutes; each delivery is processed once."
      )
  )
  .add(
    HttpApiEndpoint.get("comeBack", "/kyc/return")
      .setUrlParams(
        withFieldMessages(
          Schema.Struct({ user: Address.annotations({ description: "the user the identity provider sends back" }) })
        )
      )
      .addSuccess(HttpApiSchema.Empty(303))
      .annotate(OpenApi.Summary, "Back from the identity provider")
      .annotate(
        OpenApi.Description,
        "Where every identity provider sends the person after its flow: a 303 to the `returnUrl` of the user's " +
          "current check (the latest given to POST /kyc/session), else APP_URL/."
      )
  )
  .annotate(OpenApi.Title, "Identity provider callbacks")
  .annotate(
    OpenApi.Description,
    "Reached through the identity provider, not called by the app: its signed result deliveries (each " +
      "authenticated by its HMAC signature headers, not by a bearer token), and the person's way back to the app."
  ) {}

const SandboxSessionId = Schema.String.pipe(
  Schema.pattern(/^[A-Za-z0-9_-]{22}$/, { message: () => "must be a sandbox session id" })
)

export const SandboxOutcome = Schema.Literal("approve", "decline", "duplicate", "abandon")
export type SandboxOutcome = typeof SandboxOutcome.Type

export const SandboxForm = Schema.Struct({
  fullName: Schema.optional(Schema.String.pipe(Schema.maxLength(100))),
  documentNumber: Schema.optional(Schema.String.pipe(Schema.maxLength(32))),
  outcome: SandboxOutcome
}).pipe(HttpApiSchema.withEncoding({ kind: "UrlParams" }))
export type SandboxForm = typeof SandboxForm.Type

export class KycSandboxApi extends HttpApiGroup.make("kycSandbox")
  .add(
    HttpApiEndpoint.get("page", "/kyc/sandbox/:sessionId")
      .setPath(withFieldMessages(Schema.Struct({ sessionId: SandboxSessionId })))
      .addSuccess(HttpApiSchema.Text({ contentType: "text/html" }))
      .annotate(OpenApi.Summary, "Sandbox identity page")
      .annotate(
        OpenApi.Description,
        "The sandbox provider's hosted page (HTML) a person opens from POST /kyc/session's URL: a form to enter a " +
          "name and a document number and choose the result. Exists when KYC_PROVIDER=sandbox."
      )
  )
  .add(
    HttpApiEndpoint.post("submit", "/kyc/sandbox/:sessionId")
      .setPath(withFieldMessages(Schema.Struct({ sessionId: SandboxSessionId })))
      .setPayload(withFieldMessages(SandboxForm))
      .addSuccess(HttpApiSchema.Empty(303))
      .annotate(OpenApi.Summary, "Submit the sandbox identity form")
      .annotate(
        OpenApi.Description,
        "The sandbox page's form: records the chosen result, delivers the signed webhook to this service " +
          "over HTTP, then redirects (303) to the return URL."
      )
  )
  .annotate(OpenApi.Title, "Sandbox identity provider")
  .annotate(
    OpenApi.Description,
    "The built-in identity provider for development and tests (KYC_PROVIDER=sandbox): a page where the person " +
      "chooses the outcome. It delivers its result through the same signed webhook as a real provider."
  ) {}
