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
 * The document number is kept sealed (AES-256-GCM under the card data key) in the sandbox's table.
 */
import { randomBytes, randomUUID } from "node:crypto"
import path from "node:path"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Clock, Context, Effect, Either, Layer, Option, ParseResult, Redacted, Schema } from "effect"
import { BadRequest, NotFound } from "../ApiError.js"
import { AppConfig } from "../Config.js"
import { CardDataKey, decrypt, encrypt, loadOrCreateSecretFile, normalizeDocumentNumber } from "../cards/CardCrypto.js"
import { awaitServerAddress, type ServerAddress } from "../ServerAddress.js"
import { KycProviderFailed, type SandboxForm, WebhookSignatureInvalid, WebhookTimestampStale } from "./Api.js"
import { KycConfig } from "./KycConfig.js"
import { KycProvider, type SessionReport, type VerifiedDocument } from "./KycProvider.js"
import { SandboxRepo, type SandboxRow } from "./KycRepo.js"
import type { SessionStatus } from "./KycState.js"
import { type SandboxPageState, sandboxPage } from "./SandboxPage.js"
import { signSandbox, verifySandbox } from "./Webhook.js"

export const SANDBOX_SESSION_TTL_MS = 30 * 60 * 1000
export const SANDBOX_SECRET_FILE = "kyc-sandbox.secret"
const DELIVERY_TIMEOUT = "10 seconds"

// ---------------------------------------------------------------------------------------------
// The webhook the sandbox sends

export const SandboxEventStatus = Schema.Literal("pending", "approved", "declined", "duplicate", "abandoned", "expired")
export type SandboxEventStatus = typeof SandboxEventStatus.Type

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

const eventStatusOf = (outcome: SandboxForm["outcome"]): SandboxEventStatus =>
  outcome === "approve"
    ? "approved"
    : outcome === "decline"
      ? "declined"
      : outcome === "duplicate"
        ? "duplicate"
        : "abandoned"

const documentAad = (sessionId: string) => `kyc-sandbox:${sessionId}:document`

const decodeEvent = Schema.decodeUnknownEither(Schema.parseJson(SandboxEvent))

// ---------------------------------------------------------------------------------------------
// The webhook secret

/** `KYC_SANDBOX_SECRET`, else one generated once into `<DATA_DIR>/kyc-sandbox.secret` (mode 0600). */
export class SandboxSecret extends Context.Tag("app/SandboxSecret")<SandboxSecret, Redacted.Redacted<string>>() {
  static readonly layer = Layer.effect(
    SandboxSecret,
    Effect.gen(function* () {
      const { sandboxSecret } = yield* KycConfig
      if (Option.isSome(sandboxSecret)) return sandboxSecret.value
      const { dataDir } = yield* AppConfig
      const file = path.resolve(dataDir, SANDBOX_SECRET_FILE)
      const loaded = yield* Effect.try(() => loadOrCreateSecretFile(file, () => randomBytes(32).toString("hex"))).pipe(
        Effect.orDie
      )
      const secret = loaded.text.trim()
      if (secret === "") return yield* Effect.dieMessage(`${file} is empty`)
      yield* Effect.logInfo(
        `sandbox identity provider: webhook secret ${loaded.created ? "generated into" : "read from"} ${file}`
      )
      return Redacted.make(secret)
    })
  )
}

// ---------------------------------------------------------------------------------------------
// The provider adapter

const report = (row: SandboxRow, keys: CardDataKey["Type"], now: number): SessionReport => {
  if (row.outcome === null) {
    return { status: row.expiresAt.getTime() <= now ? "expired" : "pending", document: Option.none() }
  }
  const status = sessionStatusOf(eventStatusOf(row.outcome))
  const number =
    row.documentNumberSealed === null
      ? Option.none<string>()
      : decrypt(keys.encryption, row.documentNumberSealed, documentAad(row.id))
  const document: Option.Option<VerifiedDocument> =
    row.fullName !== null && Option.isSome(number)
      ? Option.some({ fullName: row.fullName, documentNumber: Redacted.make(number.value) })
      : Option.none()
  return { status, document }
}

export const makeSandboxProvider = Effect.gen(function* () {
  const repo = yield* SandboxRepo
  const secret = yield* SandboxSecret
  const keys = yield* CardDataKey
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
        return report(row.value, keys, yield* Clock.currentTimeMillis)
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
            error: `the sandbox event is malformed: ${ParseResult.TreeFormatter.formatErrorSync(event.left).split("\n")[0]}`
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
).pipe(Layer.provide([SandboxRepo.Default, SandboxSecret.layer]))

// ---------------------------------------------------------------------------------------------
// The hosted page and its form

export interface SandboxPage {
  readonly html: string
}

export interface SandboxDeskShape {
  /** The page for a session, in whatever state it is. */
  readonly page: (sessionId: string) => Effect.Effect<SandboxPage, NotFound>
  /**
   * Records the person's choice, delivers the signed webhook, and answers where to send the
   * person next: the return URL, or the page itself when the session was already closed.
   */
  readonly submit: (
    sessionId: string,
    form: SandboxForm
  ) => Effect.Effect<{ readonly redirectTo: string }, NotFound | BadRequest>
}

export class SandboxDesk extends Context.Tag("app/SandboxDesk")<SandboxDesk, SandboxDeskShape>() {}

const FULL_NAME = /^[^\p{Cc}\p{Cf}]{1,100}$/u
const DOCUMENT_NUMBER = /^[\p{L}\p{N} ./-]{4,32}$/u

/** Checks the typed document details; approve needs both, the other outcomes take what is given. */
export const checkForm = (form: SandboxForm): Either.Either<Option.Option<VerifiedDocument>, string> => {
  const fullName = (form.fullName ?? "").trim().replace(/\s+/g, " ")
  const number = (form.documentNumber ?? "").trim()
  if (fullName === "" && number === "") {
    return form.outcome === "approve"
      ? Either.left("fullName and documentNumber are required to approve")
      : Either.right(Option.none())
  }
  if (!FULL_NAME.test(fullName)) return Either.left("fullName: must be 1 to 100 printable characters")
  if (!DOCUMENT_NUMBER.test(number) || normalizeDocumentNumber(number).length < 4) {
    return Either.left("documentNumber: must be 4 to 32 letters or digits (spaces, dots, slashes and dashes allowed)")
  }
  return Either.right(Option.some({ fullName, documentNumber: Redacted.make(number) }))
}

/** Where the sandbox posts its webhooks: the override, or this process's own listener. */
const ownWebhookUrl = Effect.gen(function* () {
  const { sandboxWebhookUrl } = yield* KycConfig
  if (Option.isSome(sandboxWebhookUrl)) return sandboxWebhookUrl.value
  const address = yield* awaitServerAddress
  if (address._tag !== "TcpAddress") {
    return yield* Effect.dieMessage("KYC_SANDBOX_WEBHOOK_URL must be set when the server listens on a unix socket")
  }
  const host = ["0.0.0.0", "::", ""].includes(address.hostname) ? "127.0.0.1" : address.hostname
  const hostPart = host.includes(":") ? `[${host}]` : host
  return `http://${hostPart}:${address.port}/kyc/webhook/sandbox`
})

const makeSandboxDesk = Effect.gen(function* () {
  const repo = yield* SandboxRepo
  const secret = yield* SandboxSecret
  const keys = yield* CardDataKey
  // Resolved at the first delivery: the server listens only after this service is built.
  const context = yield* Effect.context<KycConfig | ServerAddress>()
  const webhookUrl = yield* Effect.cached(ownWebhookUrl.pipe(Effect.provide(context)))
  const http = yield* HttpClient.HttpClient
  const notFound = new NotFound({ error: "no such sandbox identity session" })

  const find = (sessionId: string) =>
    repo
      .find(sessionId)
      .pipe(Effect.flatMap(Option.match({ onNone: () => Effect.fail(notFound), onSome: Effect.succeed })))

  /** POSTs the signed event; failures are logged (reconciliation picks the result up later). */
  const deliver = (event: SandboxEvent, now: number) =>
    Effect.gen(function* () {
      const body = JSON.stringify(event)
      const request = HttpClientRequest.post(yield* webhookUrl).pipe(
        HttpClientRequest.setHeaders(signSandbox(Redacted.value(secret), body, now)),
        HttpClientRequest.bodyText(body, "application/json")
      )
      const response = yield* http.execute(request).pipe(Effect.timeout(DELIVERY_TIMEOUT), Effect.scoped)
      if (response.status < 200 || response.status >= 300) {
        yield* Effect.logWarning(`sandbox webhook delivery answered ${response.status}`)
      }
    }).pipe(
      Effect.catchAll((error) => Effect.logWarning(`sandbox webhook delivery failed: ${error._tag}`)),
      Effect.withSpan("Sandbox.deliver", {
        attributes: { "kyc.session_id": event.sessionId, "kyc.delivery_id": event.id }
      })
    )

  return SandboxDesk.of({
    page: (sessionId) =>
      Effect.gen(function* () {
        const row = yield* find(sessionId)
        const now = yield* Clock.currentTimeMillis
        const state: SandboxPageState =
          row.outcome !== null ? "finished" : row.expiresAt.getTime() <= now ? "expired" : "open"
        return { html: sandboxPage({ state, returnUrl: row.returnUrl }) }
      }).pipe(Effect.withSpan("Sandbox.page", { attributes: { "kyc.session_id": sessionId } })),

    submit: (sessionId, form) =>
      Effect.gen(function* () {
        const row = yield* find(sessionId)
        const checked = checkForm(form)
        if (Either.isLeft(checked)) return yield* new BadRequest({ error: checked.left })
        const document = checked.right
        const now = yield* Clock.currentTimeMillis
        const recorded = yield* repo.complete({
          id: sessionId,
          outcome: form.outcome,
          fullName: Option.match(document, { onNone: () => null, onSome: (doc) => doc.fullName }),
          documentNumberSealed: Option.match(document, {
            onNone: () => null,
            onSome: (doc) => encrypt(keys.encryption, Redacted.value(doc.documentNumber), documentAad(sessionId))
          }),
          now: new Date(now)
        })
        // Already answered or expired: show the page again, which says so.
        if (!recorded) return { redirectTo: `/kyc/sandbox/${sessionId}` }
        const status = eventStatusOf(form.outcome)
        yield* deliver(
          {
            id: randomUUID(),
            type: "session.updated",
            sessionId,
            status,
            occurredAt: now,
            ...(status === "approved" || status === "duplicate"
              ? Option.match(document, {
                  onNone: () => ({}),
                  onSome: (doc) => ({
                    document: { fullName: doc.fullName, documentNumber: Redacted.value(doc.documentNumber) }
                  })
                })
              : {})
          },
          now
        )
        return { redirectTo: row.returnUrl }
      }).pipe(
        Effect.withSpan("Sandbox.submit", { attributes: { "kyc.session_id": sessionId, "kyc.outcome": form.outcome } })
      )
  })
})

const disabledDesk = SandboxDesk.of({
  page: () => Effect.fail(new NotFound({ error: "the sandbox identity provider is not enabled (KYC_PROVIDER)" })),
  submit: () => Effect.fail(new NotFound({ error: "the sandbox identity provider is not enabled (KYC_PROVIDER)" }))
})

/** The sandbox's page and form when it is the active provider; 404 for both otherwise. */
export const SandboxDeskLive = Layer.unwrapEffect(
  Effect.map(KycConfig, (config) =>
    config.provider === "sandbox"
      ? Layer.effect(SandboxDesk, makeSandboxDesk).pipe(
          Layer.provide([SandboxRepo.Default, SandboxSecret.layer, FetchHttpClient.layer])
        )
      : Layer.succeed(SandboxDesk, disabledDesk)
  )
).pipe(Layer.provide(KycConfig.layer), Layer.provide(CardDataKey.layer))
