/**
 * The issuer's side of the card network: each authorization request decided within its budget from
 * the card's state, the holder's controls and the funds, and each later event of the transaction
 * applied once. Holds are rows; every decision and event runs with its card's row locked, so the
 * holds never exceed what was available, whichever replica decides.
 *
 * Past CARD_AUTHORIZATION_BUDGET, or on any failure of ours (the database stalled), the network
 * gets the stand-in answer at once; the decision's transaction is cut (a rollback: no hold is left
 * half made) and the stand-in is recorded as soon as the database takes it, overriding whatever the
 * cut transaction may still have committed, so that the stored answer is the one the network got.
 */
import { Cause, Clock, Duration, Effect, Either, Option, Schedule } from "effect"
import { allowanceFigures, allowanceState } from "../cards/Allowance.js"
import { CardProgram } from "../cards/CardProgram.js"
import { ChainClient } from "../chain/ChainClient.js"
import { countAuthorization, countAuthorizationStandIn, recordAuthorizationDecision } from "../observability/Metrics.js"
import { traced } from "../observability/Traced.js"
import { type CardAuthorization, NetworkMessageRejected, NetworkSignatureRejected } from "./Api.js"
import { AuthorizationEvents } from "./AuthorizationEvents.js"
import {
  AuthorizationRepo,
  authorizationItem,
  type LockedCard,
  type NewAuthorization,
  type StoredAuthorization
} from "./AuthorizationRepo.js"
import { authorizationSettings } from "./AuthorizationSettings.js"
import { balanceSettings } from "./BalanceSettings.js"
import { type AuthorizationRequest, CardNetwork, type Outcome, type TransactionUpdate } from "./CardNetwork.js"
import { type Decision, type DeclineReason, decide, limitWindows } from "./Decide.js"
import { type Amounts, applyEvent, settle } from "./Lifecycle.js"
import type { HeaderBag } from "./StandardWebhooks.js"

/** How long a stand-in keeps being offered to a database that does not take it. */
const STAND_IN_RECORD_ATTEMPTS = Schedule.exponential("200 millis", 2).pipe(
  Schedule.either(Schedule.spaced("5 seconds")),
  Schedule.upTo("10 minutes")
)

/**
 * One at a time per card on this replica: requests for a busy card wait here, not holding a pooled
 * connection while they wait for the card's row lock (a burst on one card would otherwise take the
 * whole pool). Across replicas the row lock is what serializes them.
 */
const perCard = () => {
  const locks = new Map<string, { readonly lock: Effect.Semaphore; users: number }>()
  return <A, E, R>(card: string, effect: Effect.Effect<A, E, R>) =>
    Effect.acquireUseRelease(
      Effect.sync(() => {
        const entry = locks.get(card) ?? { lock: Effect.unsafeMakeSemaphore(1), users: 0 }
        entry.users += 1
        locks.set(card, entry)
        return entry
      }),
      (entry) => entry.lock.withPermits(1)(effect),
      (entry) =>
        Effect.sync(() => {
          entry.users -= 1
          if (entry.users === 0) locks.delete(card)
        })
    )
}

const outcomeOf = (decision: Decision): Outcome =>
  decision.approved
    ? { approved: true, reason: null, available: decision.availableAfter }
    : { approved: false, reason: decision.reason, available: decision.available ?? null }

const storedOutcome = (row: StoredAuthorization): Outcome => ({
  approved: row.approved,
  reason: row.reason as Outcome["reason"],
  available: row.availableAfterMicros
})

const amountsOf = (row: StoredAuthorization): Amounts => ({
  approved: row.approvedMicros,
  held: row.heldMicros,
  cleared: row.clearedMicros,
  status: row.status
})

export class Authorizations extends Effect.Service<Authorizations>()("app/Authorizations", {
  effect: Effect.gen(function* () {
    const repo = yield* AuthorizationRepo
    const network = yield* CardNetwork
    const events = yield* AuthorizationEvents
    const settings = yield* authorizationSettings
    const { maxAge } = yield* balanceSettings
    const usd1Decimals = (yield* ChainClient).usd1.decimals
    const program = yield* CardProgram
    const atomicPerMicro = 10n ** BigInt(Math.max(0, usd1Decimals - 6))
    const maxBalanceAgeMs = Duration.toMillis(maxAge)
    const holdTtlMs = Duration.toMillis(settings.holdTtl)
    const oneAtATime = perCard()

    /** Stores a row and the event that tells its holder, in one statement. */
    const tell = (card: { readonly address: LockedCard["address"] }, item: CardAuthorization) =>
      events.publishing(card.address, item)

    const newRow = (
      request: AuthorizationRequest,
      card: Pick<LockedCard, "id" | "address">,
      at: number,
      answer: {
        readonly approved: boolean
        readonly reason: NewAuthorization["reason"]
        readonly available: bigint | null
      }
    ): NewAuthorization => ({
      id: request.authorizationId,
      messageId: request.messageId,
      cardId: card.id,
      address: card.address,
      network: network.name,
      approved: answer.approved,
      reason: answer.reason,
      requestedMicros: request.amount,
      availableAfterMicros: answer.available,
      merchant: request.merchant,
      channel: request.channel,
      at: new Date(at),
      holdExpiresAt: new Date(at + holdTtlMs)
    })

    /** The row as it will be stored, as the holder's item (for the event stored with it). */
    const itemOf = (row: NewAuthorization, now: number) =>
      authorizationItem(
        {
          id: row.id,
          messageId: row.messageId,
          approved: row.approved,
          reason: row.reason,
          requestedMicros: row.requestedMicros,
          approvedMicros: row.approved ? row.requestedMicros : 0n,
          heldMicros: row.approved ? row.requestedMicros : 0n,
          clearedMicros: 0n,
          availableAfterMicros: row.availableAfterMicros,
          status: row.approved ? "pending" : "declined",
          merchantName: row.merchant.name,
          merchantMcc: row.merchant.mcc,
          merchantCity: row.merchant.city,
          merchantCountry: row.merchant.country,
          channel: row.channel,
          createdAt: row.at,
          holdExpiresAt: row.holdExpiresAt
        },
        now
      )

    /** Decides and stores, in one transaction with the card's row locked. */
    const decideAndStore = (request: AuthorizationRequest) =>
      oneAtATime(
        request.cardToken,
        repo.withTransaction(
          Effect.gen(function* () {
            const found = yield* repo.lockCard({ cardToken: request.cardToken })
            // A token the network should never send us: nothing to hold against, nothing to store.
            if (Option.isNone(found)) {
              yield* Effect.logWarning("card network asked about a card this issuer does not know")
              return { approved: false, reason: "card_canceled", available: null } satisfies Outcome
            }
            const card = found.value
            yield* Effect.annotateCurrentSpan("card.id", card.id)
            const now = yield* Clock.currentTimeMillis
            const { dayStart, monthStart } = limitWindows(now)
            const position = yield* repo.position({
              card,
              authorizationId: request.authorizationId,
              messageId: request.messageId,
              now: new Date(now),
              dayStart: new Date(dayStart),
              monthStart: new Date(monthStart),
              atomicPerMicro,
              spender: program.address
            })
            const standing = {
              state: card.canceled ? ("canceled" as const) : ("active" as const),
              expiry: card.expiry,
              controls: {
                frozen: card.frozen,
                perTransaction: card.perTransactionMicros,
                daily: card.dailyMicros,
                monthly: card.monthlyMicros,
                blockedMcc: card.blockedMcc
              }
            }
            const committed = { held: position.held, clearedPending: position.clearedPending }
            const allowance = allowanceState({ ...position.allowance, now })
            const funds = {
              balance: position.balance,
              balanceCheckedAt: position.balanceCheckedAt,
              ...committed,
              allowance: {
                state: allowance,
                remaining: allowanceFigures({
                  state: allowance,
                  cap: position.allowance.signed?.cap ?? 0n,
                  onChain: position.allowance.onChain,
                  committed
                }).remaining
              }
            }
            if (Option.isSome(position.existing)) {
              const existing = position.existing.value
              // The same message again (a re-delivery, or sent concurrently): the same answer.
              if (existing.messageId === request.messageId) return storedOutcome(existing)
              return yield* increment(request, card, existing, position.increment, {
                decision: existing.approved
                  ? decide({
                      card: standing,
                      funds,
                      spent: position.spent,
                      request: {
                        amount: request.amount,
                        total: existing.approvedMicros + request.amount,
                        mcc: request.merchant.mcc,
                        at: now
                      },
                      maxBalanceAgeMs
                    })
                  : // An increment of a declined authorization is declined for the same reason.
                    { approved: false, reason: existing.reason as DeclineReason, available: undefined },
                now
              })
            }
            const decision = decide({
              card: standing,
              funds,
              spent: position.spent,
              request: { amount: request.amount, total: request.amount, mcc: request.merchant.mcc, at: now },
              maxBalanceAgeMs
            })
            const outcome = outcomeOf(decision)
            const row = newRow(request, card, now, outcome)
            yield* repo.insertAuthorization(row, tell(card, itemOf(row, now)))
            return outcome
          })
        )
      )

    /** A further amount on an authorization already decided: an increment, answered and stored once. */
    const increment = (
      request: AuthorizationRequest,
      card: LockedCard,
      existing: StoredAuthorization,
      answered: Option.Option<{ readonly approved: boolean; readonly reason: string | null }>,
      input: { readonly decision: Decision; readonly now: number }
    ) =>
      Effect.gen(function* () {
        if (Option.isSome(answered)) {
          return {
            approved: answered.value.approved,
            reason: answered.value.reason as Outcome["reason"],
            available: null
          } satisfies Outcome
        }
        const outcome = outcomeOf(input.decision)
        yield* repo.insertEvent({
          id: request.messageId,
          transactionId: request.authorizationId,
          authorizationId: existing.id,
          cardId: card.id,
          address: card.address,
          kind: "increment",
          amountMicros: request.amount,
          approved: outcome.approved,
          reason: outcome.reason,
          money: null,
          merchant: request.merchant,
          at: new Date(input.now)
        })
        if (outcome.approved) {
          const amounts = {
            ...amountsOf(existing),
            approved: existing.approvedMicros + request.amount,
            held: existing.heldMicros + request.amount
          }
          const updated = { ...existing, approvedMicros: amounts.approved, heldMicros: amounts.held }
          yield* repo.updateAmounts(
            existing.id,
            amounts,
            new Date(input.now),
            tell(card, authorizationItem(updated, input.now))
          )
        }
        return outcome
      })

    /** Records the stand-in answer the network was given, retrying until the database takes it. */
    const recordStandIn = (request: AuthorizationRequest, outcome: Outcome, at: number) =>
      repo
        .withTransaction(
          Effect.gen(function* () {
            const card = yield* repo.lockCard({ cardToken: request.cardToken })
            if (Option.isNone(card)) return
            const row = newRow(request, card.value, at, { ...outcome, available: null })
            yield* repo.recordStandIn(row, tell(card.value, itemOf(row, at)))
          })
        )
        .pipe(
          Effect.sandbox,
          Effect.retry(STAND_IN_RECORD_ATTEMPTS),
          Effect.catchAll((cause) =>
            Effect.logError(
              "a stand-in answer could not be recorded; the network's records hold it",
              Cause.squash(cause)
            )
          ),
          Effect.annotateLogs({ "authorization.id": request.authorizationId })
        )

    const standIn: Outcome =
      settings.standIn === "approve"
        ? { approved: true, reason: null, available: null }
        : { approved: false, reason: "stand_in", available: null }

    /** The answer to an authorization request, within the budget whatever happens. */
    const authorize = traced("Authorizations.authorize")(function* (request: AuthorizationRequest) {
      yield* Effect.annotateCurrentSpan({
        "authorization.id": request.authorizationId,
        "authorization.message_id": request.messageId,
        "merchant.mcc": request.merchant.mcc
      })
      const started = yield* Clock.currentTimeMillis
      // Disconnected: at the deadline the answer goes out while the cut transaction rolls back.
      const decided = yield* decideAndStore(request).pipe(
        Effect.disconnect,
        Effect.timeoutFail({ duration: settings.budget, onTimeout: () => "deadline" as const }),
        Effect.sandbox,
        Effect.either
      )
      const outcome = Either.isRight(decided) ? decided.right : standIn
      if (Either.isLeft(decided)) {
        const cause = Cause.failureOption(decided.left)
        const why = Option.isSome(cause) && cause.value === "deadline" ? "deadline" : "failure"
        yield* Effect.logWarning(`card authorization answered with the stand-in (${why})`).pipe(
          Effect.annotateLogs({ "authorization.id": request.authorizationId }),
          why === "failure" ? Effect.annotateLogs("cause", Cause.pretty(decided.left)) : (effect) => effect
        )
        yield* countAuthorizationStandIn(why)
        yield* Effect.forkDaemon(recordStandIn(request, outcome, started))
      }
      yield* countAuthorization(outcome.approved, outcome.reason)
      yield* recordAuthorizationDecision(((yield* Clock.currentTimeMillis) - started) / 1000)
      yield* Effect.annotateCurrentSpan({
        "authorization.approved": outcome.approved,
        ...(outcome.reason === null ? {} : { "authorization.reason": outcome.reason })
      })
      return outcome
    })

    /** A transaction's later events, each applied once, with its card's row locked. */
    const update = traced("Authorizations.update")(function* (message: TransactionUpdate) {
      yield* Effect.annotateCurrentSpan({ "authorization.id": message.authorizationId })
      yield* oneAtATime(
        message.cardToken,
        repo.withTransaction(
          Effect.gen(function* () {
            const found = yield* repo.lockCard({ cardToken: message.cardToken })
            if (Option.isNone(found)) {
              return yield* Effect.logWarning("card network sent events of a card this issuer does not know")
            }
            const card = found.value
            const now = yield* Clock.currentTimeMillis
            const authorization = yield* repo.lockAuthorization(message.authorizationId)
            let amounts = Option.map(authorization, amountsOf)
            for (const event of message.events) {
              const recorded = yield* repo.insertEvent({
                id: event.id,
                transactionId: message.authorizationId,
                authorizationId: Option.isSome(authorization) ? authorization.value.id : null,
                cardId: card.id,
                address: card.address,
                kind: event.type,
                amountMicros: event.amount,
                approved: null,
                reason: null,
                money: event.type === "clearing" ? "debit_pending" : event.type === "refund" ? "credit_pending" : null,
                merchant: message.merchant,
                at: new Date(now)
              })
              if (recorded) amounts = Option.map(amounts, (current) => applyEvent(current, event))
            }
            if (message.settled) amounts = Option.map(amounts, settle)
            if (Option.isNone(authorization) || Option.isNone(amounts)) return
            const before = amountsOf(authorization.value)
            const after = amounts.value
            if (
              before.approved === after.approved &&
              before.held === after.held &&
              before.cleared === after.cleared &&
              before.status === after.status
            ) {
              return
            }
            const updated = {
              ...authorization.value,
              approvedMicros: after.approved,
              heldMicros: after.held,
              clearedMicros: after.cleared,
              status: after.status
            }
            yield* repo.updateAmounts(updated.id, after, new Date(now), tell(card, authorizationItem(updated, now)))
          })
        )
      )
    })

    /**
     * A message from the network: verified, then an authorization answered (the network's answer
     * body) or a transaction's events applied.
     */
    const receive = (body: Uint8Array, headers: HeaderBag) =>
      Effect.gen(function* () {
        const message = network.receive(body, headers, yield* Clock.currentTimeMillis)
        if (Either.isLeft(message)) {
          const error = message.left
          yield* Effect.logWarning(`card network message refused: ${error.reason}`)
          return yield* error._tag === "NetworkSignatureInvalid"
            ? new NetworkSignatureRejected({ error: `the card network's signature is invalid: ${error.reason}` })
            : new NetworkMessageRejected({ error: `the card network's message is malformed: ${error.reason}` })
        }
        if (message.right.kind === "authorization") {
          const request = message.right
          return network.answer(request, yield* authorize(request))
        }
        yield* update(message.right)
        return { received: true }
      })

    /** The holder's authorizations, newest first. */
    const list = traced("Authorizations.list")(function* (
      address: LockedCard["address"],
      query: { readonly limit?: number; readonly before?: string }
    ) {
      const rows = yield* repo.page({ address, limit: query.limit ?? 50, before: query.before ?? null })
      const now = yield* Clock.currentTimeMillis
      return rows.map((row) => authorizationItem(row, now))
    })

    /** One authorization as the issuer recorded it. */
    const find = (id: string) =>
      Effect.gen(function* () {
        const row = yield* repo.find(id)
        const now = yield* Clock.currentTimeMillis
        return Option.map(row, (found) => authorizationItem(found, now))
      })

    /** Why the issuer declined a request message, from its records. */
    const declineReason = (authorizationId: string, messageId: string) =>
      Effect.map(
        repo.declineReason(authorizationId, messageId),
        Option.map((reason) => reason as DeclineReason)
      )

    return { receive, authorize, update, list, find, declineReason }
  }),
  dependencies: [AuthorizationRepo.Default]
}) {}
