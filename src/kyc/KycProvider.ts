/**
 * The identity-provider port. The `Kyc` service speaks only this vocabulary; each adapter maps its
 * provider's sessions, statuses, webhooks and decisions onto it.
 *
 * Implementations: `SandboxProvider` (built in, the default), `DiditProvider` (Didit's hosted
 * verification) and `ScriptedKycProvider` (tests). Ports.ts picks one from `KYC_PROVIDER`.
 */
import { Context, type Effect, type Option } from "effect"
import type { Address } from "../chain/Address.js"
import type { BadRequest } from "../http/ApiError.js"
import type { KycProviderFailed, WebhookSignatureInvalid, WebhookTimestampStale } from "./Api.js"
import type { VerifiedDocument } from "./Document.js"
import type { SessionStatus } from "./KycState.js"
import type { HeaderBag } from "./Webhook.js"

/** A provider's current view of one session. */
export interface SessionReport {
  readonly status: SessionStatus
  /** Present when the provider has a verified document (at least on approval). */
  readonly document: Option.Option<VerifiedDocument>
}

/** One change to one session, from a webhook or from reconciliation. */
export interface SessionUpdate extends SessionReport {
  readonly sessionId: string
  /** The provider's time for the event (ms). */
  readonly occurredAt: number
}

/** An authenticated webhook delivery; `update` is none for events that concern no session status. */
export interface WebhookDelivery {
  /** Unique per delivery: the provider's event id, else a digest of the raw body. */
  readonly deliveryId: string
  readonly update: Option.Option<SessionUpdate>
}

export interface NewSession {
  readonly sessionId: string
  readonly url: string
}

export interface KycProviderShape {
  /** The name in webhook paths (`/kyc/webhook/{name}`) and in stored sessions. */
  readonly name: string
  /** Opens a provider session for the user; the person is sent back to `returnUrl` afterwards. */
  readonly createSession: (request: {
    readonly address: Address
    readonly returnUrl: string
  }) => Effect.Effect<NewSession, KycProviderFailed>
  /** The provider's current view of a session, with the verified document when it has one. */
  readonly getSession: (sessionId: string) => Effect.Effect<SessionReport, KycProviderFailed>
  /** Authenticates a webhook over its raw bytes and parses it. */
  readonly verifyWebhook: (
    body: Uint8Array,
    headers: HeaderBag,
    nowMs: number
  ) => Effect.Effect<WebhookDelivery, WebhookSignatureInvalid | WebhookTimestampStale | BadRequest>
}

export class KycProvider extends Context.Tag("app/KycProvider")<KycProvider, KycProviderShape>() {}
