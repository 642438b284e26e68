/**
 * The built-in sandbox identity provider (the default, `KYC_PROVIDER=sandbox`).
 *
 * It behaves like a hosted provider whose "website" is served by this service:
 * - `createSession` records a sandbox session (valid 30 minutes) and answers the URL of its page,
 *   `${API_URL}/kyc/sandbox/<id>`;
 * - on that page a person types a full name and a document number and chooses approve, decline,
 *   duplicate or abandon (`SandboxDesk.submit`); the choice is recorded, then a signed webhook is
 *   POSTed over real HTTP to this service's own `/kyc/webhook/sandbox` (the listener's loopback
 *   address, or `KYC_SANDBOX_WEBHOOK_URL`), exactly as a real provider would deliver it, and the
 *   person is redirected to the return URL;
 * - `getSession` answers the recorded result (used by reconciliation while the app polls);
 * - webhooks carry `x-sandbox-timestamp` and `x-sandbox-signature: v1=<hex>`, an HMAC-SHA256 with
 *   `KYC_SANDBOX_SECRET` over `"<timestamp>." + raw body` (see Webhook.ts).
 *
 * The document number is kept sealed (AES-256-GCM under its own derived key) in the sandbox's
 * table. The page and its form are in SandboxDesk.ts.
 */
import { randomBytes } from "node:crypto"
import { Clock, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import { BadRequest } from "../http/ApiError.js"
import { describeIssue } from "../http/FieldMessages.js"
import { open, type SecretName, Secrets } from "../runtime/Secrets.js"
import { KycProviderFailed, type SandboxForm, WebhookSignatureInvalid, WebhookTimestampStale } from "./Api.js"
import type { VerifiedDocument } from "./Document.js"
import { KycConfig } from "./KycConfig.js"
import { KycProvider, type SessionReport } from "./KycProvider.js"
import { SandboxRepo, type SandboxRow } from "./KycRepo.js"
import type { SessionStatus } from "./KycState.js"
import { verifySandbox } from "./Webhook.js"

const SANDBOX_SESSION_TTL_MS = 30 * 60 * 1000

/** The HMAC secret of the sandbox's webhooks. */
export const SANDBOX_SECRET: SecretName = {
  variable: "KYC_SANDBOX_SECRET",
  file: "kyc-sandbox.secret",
  generate: () => randomBytes(32).toString("hex")
}

// ---------------------------------------------------------------------------------------------
// The webhook the sandbox sends

const SandboxEventStatus = Schema.Literal("pending", "approved", "declined", "duplicate", "abandoned", "expired")
type SandboxEventStatus = typeof SandboxEventStatus.Type

export const SandboxEvent = Schema.Struct({
  /** Unique per delivery. */
  id: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100)),
  type: Schema.Literal("session.updated"),
  sessionId: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100)),
  status: SandboxEventStatus,
  /** ms since epoch */
  occurredAt: Schema.Number,
  document: Schema.optional(Schema.Struct({ fullName: Schema.String, documentNumber: Schema.String }))
})
export type SandboxEvent = typeof SandboxEvent.Type

export const sessionStatusOf = (status: SandboxEventStatus): SessionStatus =>
  status === "abandoned" ? "expired" : status

export const eventStatusOf = (outcome: SandboxForm["outcome"]): SandboxEventStatus =>
  outcome === "approve"
    ? "approved"
    : outcome === "decline"
      ? "declined"
      : outcome === "duplicate"
        ? "duplicate"
        : "abandoned"

export const documentAad = (sessionId: string) => `kyc-sandbox:${sessionId}:document`

const decodeEvent = Schema.decodeUnknownEither(Schema.parseJson(SandboxEvent))

// ---------------------------------------------------------------------------------------------
// The provider adapter

const report = (row: SandboxRow, documentKey: Uint8Array, now: number): SessionReport => {
  if (row.outcome === null) {
    return { status: row.expiresAt.getTime() <= now ? "expired" : "pending", document: Option.none() }
  }
  const status = sessionStatusOf(eventStatusOf(row.outcome))
  const number =
    row.documentNumberSealed === null
      ? Option.none<string>()
      : open(documentKey, row.documentNumberSealed, documentAad(row.id))
  const document: Option.Option<VerifiedDocument> =
    row.fullName !== null && Option.isSome(number)
      ? Option.some({ fullName: row.fullName, documentNumber: Redacted.make(number.value) })
      : Option.none()
  return { status, document }
}

const makeSandboxProvider = Effect.gen(function* () {
  const repo = yield* SandboxRepo
  const secrets = yield* Secrets
  const secret = yield* secrets.secret(SANDBOX_SECRET)
  const documentKey = secrets.key("sandboxDocument")
  const { apiUrl } = yield* KycConfig

  return KycProvider.of({
    name: "sandbox",
    createSession: ({ address, returnUrl }) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const id = randomBytes(16).toString("base64url")
        yield* repo.insert({
          id,
          address,
          returnUrl,
          createdAt: new Date(now),
          expiresAt: new Date(now + SANDBOX_SESSION_TTL_MS)
        })
        return { sessionId: id, url: `${apiUrl}/kyc/sandbox/${id}` }
      }),
    getSession: (sessionId) =>
      Effect.gen(function* () {
        const row = yield* repo.find(sessionId)
        if (Option.isNone(row)) return yield* new KycProviderFailed({ error: "the sandbox has no such session" })
        return report(row.value, documentKey, yield* Clock.currentTimeMillis)
      }),
    verifyWebhook: (body, headers, nowMs) =>
      Effect.gen(function* () {
        const verdict = verifySandbox({ secret: Redacted.value(secret), body, headers, nowMs })
        if (verdict === "bad-signature") {
          return yield* new WebhookSignatureInvalid({ error: "the webhook signature does not match its body" })
        }
        if (verdict === "stale") {
          return yield* new WebhookTimestampStale({ error: "the webhook timestamp is more than 5 minutes from now" })
        }
        const event = decodeEvent(Buffer.from(body).toString("utf8"))
        if (Either.isLeft(event)) {
          return yield* new BadRequest({
            error: `the sandbox event is malformed: ${describeIssue(event.left.issue)}`
          })
        }
        const { id, sessionId, status, occurredAt, document } = event.right
        return {
          deliveryId: id,
          update: Option.some({
            sessionId,
            status: sessionStatusOf(status),
            occurredAt,
            document: Option.fromNullable(document).pipe(
              Option.map((doc) => ({ fullName: doc.fullName, documentNumber: Redacted.make(doc.documentNumber) }))
            )
          })
        }
      })
  })
})

export const SandboxProviderLive = Layer.effect(
  KycProvider,
  Effect.zipLeft(
    makeSandboxProvider,
    Effect.logWarning(
      "identity checks use the built-in SANDBOX provider: anyone can approve themselves. " +
        "Set KYC_PROVIDER=didit (or another real provider) in production."
    )
  )
).pipe(Layer.provide(SandboxRepo.Default))
