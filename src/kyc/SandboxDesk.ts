/**
 * The sandbox identity provider's hosted "website", served by this service while the sandbox is the
 * identity provider in force: the page of a session, and its form. Submitting the form records the
 * person's choice, then POSTs a signed webhook over real HTTP to this service's own
 * `/kyc/webhook/sandbox` (the listener's loopback address, or `KYC_SANDBOX_WEBHOOK_URL`), exactly
 * as a real provider would deliver it, and sends the person to the return URL.
 */
import { randomUUID } from "node:crypto"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { Clock, Context, Effect, Either, Layer, Option, Redacted } from "effect"
import { normalizeDocumentNumber } from "../cards/Cards.js"
import { BadRequest, NotFound } from "../http/ApiError.js"
import { Secrets, seal } from "../runtime/Secrets.js"
import { awaitServerAddress, type ServerAddress } from "../runtime/ServerAddress.js"
import type { SandboxForm } from "./Api.js"
import type { VerifiedDocument } from "./Document.js"
import { KycConfig } from "./KycConfig.js"
import { KycProvider } from "./KycProvider.js"
import { SandboxRepo } from "./KycRepo.js"
import { type SandboxPageState, sandboxPage } from "./SandboxPage.js"
import { documentAad, eventStatusOf, SANDBOX_SECRET, type SandboxEvent } from "./SandboxProvider.js"
import { signSandbox } from "./Webhook.js"

const DELIVERY_TIMEOUT = "10 seconds"

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
  const secrets = yield* Secrets
  const secret = yield* secrets.secret(SANDBOX_SECRET)
  const documentKey = secrets.key("sandboxDocument")
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
            onSome: (doc) => seal(documentKey, Redacted.value(doc.documentNumber), documentAad(sessionId))
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

/** The sandbox's page and form while the sandbox is the identity provider in force; 404 for both otherwise. */
export const SandboxDeskLive = Layer.unwrapEffect(
  Effect.map(KycProvider, (provider) =>
    provider.name === "sandbox"
      ? Layer.effect(SandboxDesk, makeSandboxDesk).pipe(Layer.provide([SandboxRepo.Default, FetchHttpClient.layer]))
      : Layer.succeed(SandboxDesk, disabledDesk)
  )
)
