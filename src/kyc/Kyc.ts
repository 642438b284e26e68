/**
 * The identity check: the per-user state machine, provider sessions, signed webhooks and
 * reconciliation while the app polls.
 *
 * User state (`kyc_accounts.status`), moved only while holding that row's lock:
 *
 * | state             | event                                            | next      | also                  |
 * |-------------------|--------------------------------------------------|-----------|-----------------------|
 * | none, declined    | POST /kyc/session                                | pending   | new provider session  |
 * | pending           | POST /kyc/session                                | pending   | same session's URL; a trusted returnUrl replaces the earlier |
 * | approved          | POST /kyc/session                                | approved  | 409 KYC_ALREADY_APPROVED |
 * | duplicate         | POST /kyc/session                                | duplicate | 409 KYC_DUPLICATE     |
 * | pending           | session approved, document new                   | approved  | card issued           |
 * | pending           | session approved, document already on a card     | duplicate | no card               |
 * | pending           | session declined / duplicate                     | declined / duplicate |            |
 * | pending           | session expired or abandoned                     | none      |                       |
 *
 * Within a session only forward moves happen (pending -> one terminal result, see KycState): a
 * late, repeated or out-of-order event never overwrites a terminal result. Events about a session
 * that is no longer the user's current one update that session only.
 */
import { Clock, type Duration, Effect, Option } from "effect"
import { Cards } from "../cards/Cards.js"
import type { Address } from "../chain/Address.js"
import { NotFound } from "../http/ApiError.js"
import { countKycTransition } from "../observability/Metrics.js"
import { traced } from "../observability/Traced.js"
import { AppConfig } from "../runtime/Config.js"
import { KycAlreadyApproved, KycDuplicate, KycProviderFailed } from "./Api.js"
import { KycEvents } from "./KycEvents.js"
import { KycProvider, type SessionUpdate } from "./KycProvider.js"
import { KycRepo } from "./KycRepo.js"
import { accountStateOf, advances, canStartSession, type KycState } from "./KycState.js"
import { defaultReturnUrl, resolveReturnUrl, trustedReturnUrl } from "./ReturnUrl.js"
import type { HeaderBag } from "./Webhook.js"

/** Whether a look at the provider is due, as a read of the user's standing asks it. */
export { type LookRequest, lookIsDue } from "./KycRepo.js"

/** At most one provider call per user per this window, whatever the number of polls and replicas. */
export const RECONCILE_INTERVAL_MS = 5_000
/** Creating a session or fetching a decision for a webhook: the caller waits for it. */
const PROVIDER_TIMEOUT = "10 seconds"
/** Reconciliation runs inside GET /me and sign-in, which must stay quick. */
const RECONCILE_TIMEOUT = "3 seconds"

export type WebhookOutcome = "applied" | "unchanged" | "duplicate" | "ignored"

export class Kyc extends Effect.Service<Kyc>()("app/Kyc", {
  effect: Effect.gen(function* () {
    const repo = yield* KycRepo
    const cards = yield* Cards
    const provider = yield* KycProvider
    const events = yield* KycEvents
    const { apiUrl, appUrl, webOrigins } = yield* AppConfig

    const timed = <A>(
      effect: Effect.Effect<A, KycProviderFailed>,
      duration: Duration.DurationInput = PROVIDER_TIMEOUT
    ) =>
      effect.pipe(
        Effect.timeoutFail({
          duration,
          onTimeout: () => new KycProviderFailed({ error: "the identity provider did not answer in time" })
        })
      )

    /**
     * A user's state moved (inside the transaction that moves it): the user's `kyc` event, an info
     * line with the ids (never the document) and the transitions counter.
     */
    const transition = (address: Address, from: KycState, to: KycState, sessionId: string) =>
      events
        .stateChanged(address, to)
        .pipe(
          Effect.zipRight(Effect.logInfo(`identity check: ${from} -> ${to}`)),
          Effect.annotateLogs({ "user.address": address, "kyc.provider": provider.name, "kyc.session_id": sessionId }),
          Effect.zipRight(countKycTransition(from, to))
        )

    /** An approval needs the verified document; fetch it from the provider when the event lacks it. */
    const withDocument = (update: SessionUpdate) =>
      Effect.gen(function* () {
        if (update.status !== "approved" || Option.isSome(update.document)) return update
        const session = yield* repo.findSession({ provider: provider.name, sessionId: update.sessionId })
        if (Option.isNone(session) || session.value.status !== "pending") return update
        const report = yield* timed(provider.getSession(update.sessionId))
        if (Option.isNone(report.document)) {
          yield* Effect.logWarning("identity provider approved a session without a verified document").pipe(
            Effect.annotateLogs("kyc.session_id", update.sessionId)
          )
          return yield* new KycProviderFailed({ error: "the identity provider reported no verified document" })
        }
        return { ...update, document: report.document }
      })

    /** Applies one update under the user's row lock; with a delivery id, at most once per id. */
    const apply = (update: SessionUpdate, deliveryId: Option.Option<string>) =>
      Effect.gen(function* () {
        const now = new Date(yield* Clock.currentTimeMillis)
        const key = { provider: provider.name, sessionId: update.sessionId }
        if (Option.isSome(deliveryId)) {
          const first = yield* repo.insertDelivery({
            provider: provider.name,
            deliveryId: deliveryId.value,
            sessionId: update.sessionId,
            receivedAt: now
          })
          if (!first) return "duplicate" as WebhookOutcome
        }
        const found = yield* repo.findSession(key)
        if (Option.isNone(found)) return "ignored" as WebhookOutcome
        const address = found.value.address
        const account = yield* repo.lockAccount(address)
        const session = yield* repo.lockSession(key).pipe(Effect.map(Option.getOrThrow))
        if (!advances(session.status, update.status)) return "unchanged" as WebhookOutcome
        const current =
          Option.isSome(account) &&
          account.value.status === "pending" &&
          account.value.provider === provider.name &&
          account.value.sessionId === update.sessionId
        let status = update.status
        if (status === "approved" && current) {
          if (Option.isNone(update.document)) {
            return yield* new KycProviderFailed({ error: "the identity provider reported no verified document" })
          }
          const document = update.document.value
          const issued = yield* cards.issueOnApproval({
            address,
            fullName: document.fullName,
            documentNumber: document.documentNumber
          })
          if (issued === "duplicate") status = "duplicate"
        }
        // The provider's event time is kept for the record; a nonsensical one is replaced by ours.
        const eventAt =
          Number.isFinite(update.occurredAt) && Math.abs(update.occurredAt) < 8.64e15
            ? update.occurredAt
            : now.getTime()
        yield* repo.updateSession({ ...key, status, eventAt: new Date(eventAt), updatedAt: now })
        if (current) {
          const next = accountStateOf(status)
          yield* repo.setAccountStatus(address, next, now)
          yield* transition(address, "pending", next, update.sessionId)
        }
        return "applied" as WebhookOutcome
      }).pipe(
        repo.withTransaction,
        Effect.withSpan("Kyc.apply", {
          attributes: { "kyc.provider": provider.name, "kyc.session_id": update.sessionId, "kyc.status": update.status }
        })
      )

    /** A look at the provider as of `now` (KycRepo's `lookIsDue`): due RECONCILE_INTERVAL_MS after the last. */
    const lookAt = (address: Address, now: number) => ({
      address,
      provider: provider.name,
      now: new Date(now),
      cutoff: new Date(now - RECONCILE_INTERVAL_MS)
    })

    /** Asks the provider about a pending session this replica claimed. Failures are logged. */
    const askProvider = (address: Address, sessionId: string, now: number) =>
      Effect.gen(function* () {
        yield* Effect.annotateCurrentSpan("kyc.session_id", sessionId)
        // getSession answers the verified document with an approval; apply refuses one without.
        const report = yield* timed(provider.getSession(sessionId), RECONCILE_TIMEOUT)
        yield* apply({ sessionId, occurredAt: now, ...report }, Option.none())
      }).pipe(
        Effect.catchTag("KycProviderFailed", (error) =>
          Effect.logWarning(`identity check reconciliation skipped: ${error.error}`).pipe(
            Effect.annotateLogs("user.address", address)
          )
        ),
        Effect.withSpan("Kyc.reconcile", { attributes: { "user.address": address, "kyc.provider": provider.name } })
      )

    /**
     * Asks the provider about the user's pending session, at most once per RECONCILE_INTERVAL_MS
     * (claimed with a timestamp in the user's row, so it holds across replicas). Failures are logged.
     * True when this call won the claim and asked.
     */
    const reconcile = (address: Address) =>
      Effect.gen(function* () {
        const now = yield* Clock.currentTimeMillis
        const sessionId = yield* repo.claimCheck(lookAt(address, now))
        if (sessionId === undefined) return false
        yield* askProvider(address, sessionId, now)
        return true
      })

    /**
     * Where every provider sends the person back: this service, which forwards them to the session's
     * latest `returnUrl` (`returnUrlOf`). A provider is told its callback once, at session creation;
     * through this one the user can change it while the check is pending, with any provider.
     */
    const providerCallback = (address: Address) => `${apiUrl}/kyc/return?user=${address}`

    const startSession = traced("Kyc.startSession")(function* (address: Address, returnUrl: string | undefined) {
      yield* Effect.annotateCurrentSpan({ "user.address": address, "kyc.provider": provider.name })
      // A pending session the person abandoned may have expired at the provider: learn that first.
      yield* reconcile(address)
      return yield* Effect.gen(function* () {
        const now = new Date(yield* Clock.currentTimeMillis)
        yield* repo.ensureAccount(address, now)
        const account = yield* repo.lockAccount(address).pipe(Effect.map(Option.getOrThrow))
        if (account.status === "pending") {
          // Resumed: the same session's page again (a check pending at a provider no longer in
          // force starts over with this one), and its way back moved to a newly given trusted URL.
          const session =
            account.provider === provider.name && account.sessionId !== null
              ? yield* repo.findSession({ provider: provider.name, sessionId: account.sessionId })
              : Option.none()
          if (Option.isSome(session)) {
            const { sessionId, url } = session.value
            yield* Effect.annotateCurrentSpan("kyc.session_id", sessionId)
            const moved = returnUrl === undefined ? undefined : trustedReturnUrl(returnUrl, webOrigins)
            if (moved !== undefined) {
              yield* repo.setReturnUrl({ provider: provider.name, sessionId, returnUrl: moved, updatedAt: now })
            }
            return { url }
          }
        } else if (!canStartSession(account.status)) {
          return yield* account.status === "approved"
            ? new KycAlreadyApproved({ error: "the identity check is already approved" })
            : new KycDuplicate({ error: "this identity document already holds another card" })
        }
        const created = yield* timed(provider.createSession({ address, returnUrl: providerCallback(address) }))
        yield* Effect.annotateCurrentSpan("kyc.session_id", created.sessionId)
        yield* repo.insertSession({
          provider: provider.name,
          sessionId: created.sessionId,
          address,
          url: created.url,
          returnUrl: resolveReturnUrl(returnUrl, { webOrigins, appUrl }),
          status: "pending",
          createdAt: now,
          updatedAt: now
        })
        yield* repo.updateAccount({
          address,
          status: "pending",
          provider: provider.name,
          sessionId: created.sessionId,
          updatedAt: now
        })
        yield* transition(address, account.status, "pending", created.sessionId)
        return { url: created.url }
      }).pipe(repo.withTransaction)
    })

    /** Where the person coming back from the provider goes: their session's `returnUrl`, else `${APP_URL}/`. */
    const returnUrlOf = (address: Address) =>
      repo
        .currentReturnUrl(address)
        .pipe(
          Effect.map(
            Option.match({ onNone: () => defaultReturnUrl({ webOrigins, appUrl }), onSome: (row) => row.returnUrl })
          ),
          Effect.withSpan("Kyc.returnUrlOf", { attributes: { "user.address": address } })
        )

    const receiveWebhook = traced("Kyc.receiveWebhook")(function* (
      providerName: string,
      body: Uint8Array,
      headers: HeaderBag
    ) {
      yield* Effect.annotateCurrentSpan("kyc.provider", provider.name)
      if (providerName !== provider.name) {
        return yield* new NotFound({ error: "no identity provider is active under this name" })
      }
      const delivery = yield* provider.verifyWebhook(body, headers, yield* Clock.currentTimeMillis)
      yield* Effect.annotateCurrentSpan("kyc.delivery_id", delivery.deliveryId)
      if (Option.isNone(delivery.update)) {
        const first = yield* repo.insertDelivery({
          provider: provider.name,
          deliveryId: delivery.deliveryId,
          sessionId: null,
          receivedAt: new Date(yield* Clock.currentTimeMillis)
        })
        return { received: true as const, outcome: first ? ("ignored" as const) : ("duplicate" as const) }
      }
      yield* Effect.annotateCurrentSpan("kyc.session_id", delivery.update.value.sessionId)
      const update = yield* withDocument(delivery.update.value)
      return { received: true as const, outcome: yield* apply(update, Option.some(delivery.deliveryId)) }
    })

    /** `lookAt` and `reconcile` serve where a user stands (account/Standing.ts) and the event streams. */
    return { startSession, returnUrlOf, receiveWebhook, reconcile, lookAt }
  }),
  dependencies: [KycRepo.Default]
}) {}
