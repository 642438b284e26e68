/**
 * The demo merchant: orders paid in USD1 over x402 v2, settled on chain exactly once.
 *
 * Exactly once is the database's job: a payment is reserved by inserting a settlement row while
 * holding the order's row lock; a partial unique index allows one live or successful settlement
 * per order and a unique (payer, nonce) one use per authorization, whatever the replica. The
 * relayer's signed transaction is recorded before broadcast; `reconcile` finishes whatever a
 * crash or a slow chain left unfinished, and reopens an order only when its authorization can
 * never execute any more.
 *
 * Never a lie about money: before the reservation an unavailable chain or database answers 503
 * (nothing reserved, nothing sent); after it, a payment is answered as failed (402) only when the
 * chain proves nothing was or will be transferred, as paid (200) only when the receipt proves the
 * transfer, and otherwise 202: the settlement goes on in the background and the client polls the
 * order. Each settlement has an owner, the replica that reserved it; replicas heartbeat, and the
 * reconciler takes over the settlements of a replica whose heartbeat is older than
 * SETTLEMENT_RECONCILE_AFTER, and its own replica's settlements as soon as their request let go.
 */
import { randomBytes, randomUUID } from "node:crypto"
import { Clock, Config, Duration, Effect, Either, Exit, Fiber, Layer, Option } from "effect"
import { domainSeparator, getAddress, type Hash, type Hex } from "viem"
import { activityItem } from "../cards/Statement.js"
import type { Address } from "../chain/Address.js"
import {
  ChainClient,
  type ChainClientShape,
  chainConfirmations,
  isFinal,
  type Receipt,
  type Resendable,
  receiptShowsTransfer,
  withinChainTimeout as withinChainTimeoutOf
} from "../chain/ChainClient.js"
import { Events } from "../events/Events.js"
import { ChainUnavailable } from "../http/ApiError.js"
import {
  countFeeBump,
  countLostTransaction,
  countRevertedSettlement,
  countSettlement
} from "../observability/Metrics.js"
import { outageOf, reportUnavailable } from "../observability/Outages.js"
import { traced } from "../observability/Traced.js"
import { backgroundLoop } from "../runtime/BackgroundLoop.js"
import { AppConfig, durationConfig } from "../runtime/Config.js"
import {
  Order,
  OrderAlreadyPaid,
  OrderExpired,
  OrderNotFound,
  PaymentInProgress,
  PaymentRequired,
  RelayerUnfunded
} from "./Api.js"
import { microsToAtomic, parseAmount } from "./Money.js"
import { OrderRepo, type OrderRow, type SettlementRow } from "./OrderRepo.js"
import {
  type BroadcastRecord,
  PaymentProcessor,
  revertedOnChain,
  SettlementAbandoned,
  type SettleOutcome
} from "./PaymentProcessor.js"
import {
  checkAuthorization,
  decodePaymentHeader,
  matchesOffer,
  type PaymentPayload,
  type PaymentRequirements,
  paymentRequired,
  paysResource,
  Reason,
  requirementsFor,
  type SettleResponse
} from "./X402.js"

const MAX_TIMEOUT_SECONDS = 300
/**
 * The longest a settling fiber works on one settlement (relay, broadcast, receipt) before it lets
 * the reconciler continue: a safety net over the chain client's own bounds.
 */
const SETTLEMENT_WORK_LIMIT = Duration.seconds(60)

const merchantSettings = Config.all({
  orderTtl: durationConfig("ORDER_TTL", "30 minutes"),
  reconcileInterval: durationConfig("RECONCILE_INTERVAL", "2 seconds"),
  /** A replica silent this long is dead: its settlements are the reconciler's. It heartbeats thrice as often. */
  reconcileAfter: durationConfig("SETTLEMENT_RECONCILE_AFTER", "6 seconds"),
  /** A settlement unfinished this long means a stuck relayer (a nonce gap, a transaction never mined): /ready says so. */
  stuckAfter: durationConfig("SETTLEMENT_STUCK_AFTER", "2 minutes"),
  /** How long a pay request waits for its settlement's outcome before answering 202 (poll the order). */
  settlementWait: durationConfig("SETTLEMENT_WAIT", "8 seconds")
})

/** Unfinished settlements the reconciler asks the chain about at once. */
const RECONCILED_AT_ONCE = 5
/** Journaled transactions the tracker checks per tick, least recently checked first. */
const TRACKED_PER_TICK = 50

/**
 * Payers sign EIP-3009 authorizations with the domain we announce in `extra`; a wrong name or
 * version makes every payment fail silently. So the announced domain must hash to the token's own
 * DOMAIN_SEPARATOR, checked once at start-up (a token without that function is trusted, with a
 * warning).
 */
const checkTokenDomain = (chain: ChainClientShape) =>
  Effect.gen(function* () {
    const { usd1, chainId } = chain
    const onChain = yield* chain.usd1DomainSeparator.pipe(Effect.orDie)
    if (Option.isNone(onChain)) {
      return yield* Effect.logWarning("USD1 has no readable DOMAIN_SEPARATOR; its EIP-712 domain is not checked")
    }
    const announced = domainSeparator({
      domain: { name: usd1.name, version: usd1.version, chainId, verifyingContract: usd1.address }
    })
    if (announced !== onChain.value) {
      return yield* Effect.dieMessage(
        `USD1_EIP712_NAME/USD1_EIP712_VERSION ("${usd1.name}", "${usd1.version}") do not match the token's ` +
          "DOMAIN_SEPARATOR: payments signed with them would be refused"
      )
    }
  })

/** The order as answered; built from a decoded row, so not validated again (encoding the answer checks it). */
const toOrder = (row: OrderRow, extra: { readonly amountUsd?: string } = {}) =>
  new Order(
    {
      id: row.id,
      amount: row.amount,
      description: row.description,
      status: row.status,
      ...(row.payer === null ? {} : { payer: row.payer }),
      ...(row.tx === null ? {} : { tx: row.tx }),
      createdAt: row.createdAt.getTime(),
      expiresAt: row.expiresAt.getTime(),
      ...extra
    },
    true
  )

export interface PaidOrder {
  readonly order: Order
  /** The PAYMENT-RESPONSE to send, when this request carried the payment. */
  readonly receipt: Option.Option<SettleResponse>
  /** The payment was reserved and is being settled: answer 202 with the (settling) order. */
  readonly inProgress: boolean
}

/** How a reserved settlement ended, as far as the request that reserved it can tell. */
type SettlementAnswer =
  | { readonly _tag: "Settled"; readonly transaction: Hash }
  /** Nothing was or will be transferred, and the order is open again. */
  | { readonly _tag: "Failed"; readonly reason: string; readonly transaction?: Hash }
  | { readonly _tag: "InProgress" }

export class Merchant extends Effect.Service<Merchant>()("app/Merchant", {
  effect: Effect.gen(function* () {
    const repo = yield* OrderRepo
    const chain = yield* ChainClient
    const processor = yield* PaymentProcessor
    const events = yield* Events
    const { apiUrl, merchantPayTo, chainTimeout } = yield* AppConfig
    const settings = yield* merchantSettings
    const payTo = yield* Effect.orDieWith(merchantPayTo, () => "MERCHANT_PAY_TO is required for the merchant")
    const { usd1, network } = chain
    const confirmations = yield* chainConfirmations(chain)
    yield* checkTokenDomain(chain)
    /** This replica, as the owner of the settlements it reserves. */
    const replica = randomUUID()
    /** Orders this replica's fibers are settling (a count: concurrent attempts on one order). */
    const working = new Map<string, number>()
    const track = (id: string) => Effect.sync(() => working.set(id, (working.get(id) ?? 0) + 1))
    const untrack = (id: string) =>
      Effect.sync(() => {
        const left = (working.get(id) ?? 1) - 1
        if (left > 0) working.set(id, left)
        else working.delete(id)
      })

    const inProgress: SettlementAnswer = { _tag: "InProgress" }
    const pending: SettleOutcome = { _tag: "Pending" }

    /** A chain read that does not answer within CHAIN_TIMEOUT fails like an unreachable chain. */
    const withinChainTimeout = withinChainTimeoutOf(chainTimeout)

    const requirementsOf = (row: OrderRow): PaymentRequirements =>
      requirementsFor({
        chainId: chain.chainId,
        asset: usd1.address,
        payTo,
        amountAtomic: microsToAtomic(row.amountMicros, usd1.decimals),
        maxTimeoutSeconds: MAX_TIMEOUT_SECONDS,
        domain: { name: usd1.name, version: usd1.version }
      })

    const resourceOf = (row: OrderRow) => ({
      url: `${apiUrl}/merchant/orders/${row.id}/pay`,
      description: row.description,
      mimeType: "application/json"
    })

    // Built by us from a decoded order (not validated again: encoding the answer checks it).
    const refuse = (row: OrderRow, error: string, code: PaymentRequired["code"], settlement?: SettleResponse) =>
      new PaymentRequired(
        {
          body: paymentRequired(error, resourceOf(row), requirementsOf(row)),
          code,
          ...(settlement === undefined ? {} : { settlement })
        },
        true
      )

    const receiptOf = (settlement: SettlementRow): SettleResponse => ({
      success: true,
      transaction: settlement.txHash ?? "",
      network,
      payer: settlement.payer
    })

    /** The order, with a due expiry applied first. */
    const load = (id: string) =>
      Effect.gen(function* () {
        const row = yield* repo.loadOrder({ id, now: new Date(yield* Clock.currentTimeMillis) })
        if (Option.isNone(row)) return yield* new OrderNotFound({ error: `no order ${id}` })
        const { justExpired, ...order } = row.value
        if (justExpired) yield* Effect.logInfo("order expired").pipe(Effect.annotateLogs("order.id", id))
        return order
      })

    const createOrder = traced("Merchant.createOrder")(function* (input: {
      readonly amount: string
      readonly description: string
    }) {
      const amount = Either.getOrThrow(parseAmount(input.amount)) // the payload schema already checked it
      const now = yield* Clock.currentTimeMillis
      const row: OrderRow = {
        id: randomBytes(16).toString("base64url"),
        amount: input.amount,
        amountMicros: amount.micros,
        description: input.description,
        status: "open",
        createdAt: new Date(now),
        expiresAt: new Date(now + Duration.toMillis(settings.orderTtl)),
        payer: null,
        tx: null,
        paidAt: null
      }
      yield* repo.insertOrder(row)
      yield* Effect.annotateCurrentSpan("order.id", row.id)
      yield* Effect.logInfo("order created").pipe(
        Effect.annotateLogs({ "order.id": row.id, "order.amount": row.amount })
      )
      return toOrder(row, { amountUsd: amount.normalized })
    })

    const getOrder = traced("Merchant.getOrder")(function* (id: string) {
      yield* Effect.annotateCurrentSpan("order.id", id)
      return toOrder(yield* load(id))
    })

    /**
     * An info line (ids, never the signature) and the settlements counter, for a recorded outcome; a
     * transaction mined reverted is a warning with its payer and is counted apart, so that an
     * operator can alert on gas paid for nothing.
     */
    const announceOutcome = (
      settlement: { readonly orderId: string; readonly payer: Address },
      outcome: SettleOutcome
    ) =>
      outcome._tag === "Settled"
        ? Effect.logInfo("order paid").pipe(
            Effect.annotateLogs({ "order.id": settlement.orderId, "tx.hash": outcome.transaction }),
            Effect.zipRight(countSettlement("settled"))
          )
        : outcome._tag === "Rejected"
          ? (outcome.reverted === true
              ? Effect.logWarning("settlement reverted on chain: the relayer paid its gas for nothing").pipe(
                  Effect.zipRight(countRevertedSettlement)
                )
              : Effect.logInfo(`settlement failed: ${outcome.reason}`)
            ).pipe(
              Effect.annotateLogs({
                "order.id": settlement.orderId,
                "payment.payer": settlement.payer,
                ...(outcome.transaction === undefined ? {} : { "tx.hash": outcome.transaction })
              }),
              Effect.zipRight(countSettlement("failed"))
            )
          : Effect.void

    /** The payer's `payment` event (a payer who is a user), in the transaction that records the payment. */
    const publishPayment = (paid: Option.Option<OrderRow>) =>
      Option.match(paid, {
        onNone: () => Effect.void,
        onSome: (order) =>
          events.publish(order.payer!, {
            type: "payment",
            data: activityItem({ ...order, type: "payment", at: order.paidAt!, tx: order.tx! })
          })
      })

    /**
     * A final state for a settlement and its order; idempotent. Whoever records it (the paying
     * request or the reconciler) says so once.
     */
    const finish = (
      settlement: { readonly id: number; readonly orderId: string; readonly payer: Address },
      outcome: SettleOutcome
    ) =>
      Effect.gen(function* () {
        const now = new Date(yield* Clock.currentTimeMillis)
        const recorded =
          outcome._tag === "Settled"
            ? yield* repo
                .finishSettlement(settlement.id, { status: "succeeded", txHash: outcome.transaction }, now)
                .pipe(Effect.tap(publishPayment), repo.withTransaction)
            : outcome._tag === "Rejected"
              ? yield* repo.finishSettlement(
                  settlement.id,
                  { status: "failed", txHash: outcome.transaction ?? null, errorReason: outcome.reason },
                  now
                )
              : Option.none()
        if (Option.isSome(recorded)) yield* announceOutcome(settlement, outcome)
      })

    /**
     * Makes the open order settling with a pending settlement owned by this replica: the exactly-once
     * gate. With the payer's balance, its other unsettled payments count against it.
     */
    const reserve = (order: OrderRow, payload: PaymentPayload, balance: Option.Option<bigint>) =>
      Effect.gen(function* () {
        const authorization = payload.payload.authorization
        const reserved = yield* repo
          .reserve({
            orderId: order.id,
            payer: getAddress(authorization.from),
            asset: usd1.address,
            balance: Option.getOrNull(balance),
            nonce: authorization.nonce.toLowerCase(),
            amountAtomic: BigInt(authorization.value),
            validBefore: BigInt(authorization.validBefore),
            payload,
            owner: replica,
            now: new Date(yield* Clock.currentTimeMillis)
          })
          .pipe(Effect.catchTag("DuplicateAuthorization", () => refuse(order, Reason.nonceUsed, "PAYMENT_INVALID")))
        if (reserved._tag === "Reserved") return reserved
        if (reserved._tag === "Overdrawn") {
          return yield* refuse(
            order,
            `${Reason.insufficientBalance}: the payer's other payments being settled leave too little`,
            "PAYMENT_INVALID"
          )
        }
        switch (reserved.status) {
          case null:
            return yield* new OrderNotFound({ error: `no order ${order.id}` })
          case "paid":
            return yield* new OrderAlreadyPaid({ error: "the order is already paid" })
          case "expired":
            return yield* new OrderExpired({ error: "the order expired" })
          default:
            // settling, or open when another reservation took it during this one
            return yield* new PaymentInProgress({ error: "a payment is being settled" })
        }
      })

    /**
     * What the chain says about an authorization, whoever sent the transaction: "unused"; Settled
     * when the transaction that used it moved the amount to us; Rejected when it was used otherwise
     * (cancelled, or another transfer); Pending while that transaction's receipt is not readable.
     */
    const usedAuthorization = (settlement: {
      readonly payer: Address
      readonly nonce: string
      readonly payTo: string
      readonly amountAtomic: bigint
    }) =>
      Effect.gen(function* () {
        const nonce = settlement.nonce as Hex
        if (!(yield* withinChainTimeout(chain.authorizationState(settlement.payer, nonce)))) return "unused" as const
        const hash = yield* withinChainTimeout(chain.authorizationUsedIn(settlement.payer, nonce))
        if (Option.isNone(hash)) return { _tag: "Rejected", reason: Reason.nonceUsed } satisfies SettleOutcome
        const receipt = yield* chain.receipt(hash.value, 5_000)
        if (Option.isNone(receipt)) return { _tag: "Pending", transaction: hash.value } satisfies SettleOutcome
        const paid = receiptShowsTransfer(receipt.value, {
          token: usd1.address,
          from: settlement.payer,
          to: getAddress(settlement.payTo),
          value: settlement.amountAtomic
        })
        return (paid
          ? { _tag: "Settled", transaction: hash.value }
          : {
              _tag: "Rejected",
              reason: Reason.nonceUsed,
              transaction: hash.value
            }) satisfies SettleOutcome as SettleOutcome
      })

    /** The relayer's journaled transactions that may be sent again, for closing a nonce gap. */
    const resendable: Resendable = (sender, fromNonce) =>
      Effect.gen(function* () {
        const nowSeconds = Math.floor((yield* Clock.currentTimeMillis) / 1000)
        const rows = yield* repo.resendableFrom({ sender, fromNonce, nowSeconds })
        return rows.map((row) => ({ nonce: row.nonce, raw: row.rawTx as Hex }))
      })

    /**
     * Settles a reserved payment and records the outcome; never fails. A refused or reverted
     * transfer may be moot: the authorization can have been used by another transaction paying us
     * the same amount (anyone may submit it), so the chain has the last word.
     */
    const settleReserved = (
      settlementId: number,
      orderId: string,
      payload: PaymentPayload,
      requirements: PaymentRequirements,
      payer: Address,
      verifiedStillHolds: boolean
    ) =>
      Effect.gen(function* () {
        const record = (tx: BroadcastRecord) =>
          Effect.gen(function* () {
            const now = new Date(yield* Clock.currentTimeMillis)
            const relayed = tx.nonce === null || tx.sender === null ? null : { sender: tx.sender, nonce: tx.nonce }
            const recorded = yield* repo.recordBroadcast(settlementId, { hash: tx.hash, raw: tx.raw, relayed }, now)
            if (recorded === "nonceTaken") {
              yield* Effect.logWarning(
                `relayer nonce ${tx.nonce} already carries another settlement's transaction: not sent`
              ).pipe(Effect.annotateLogs("order.id", orderId))
            }
            if (recorded !== "recorded") return yield* new SettlementAbandoned()
          })
        const settled = yield* processor.settle(payload, requirements, record, resendable, verifiedStillHolds).pipe(
          Effect.timeoutTo({
            duration: SETTLEMENT_WORK_LIMIT,
            onSuccess: (outcome) => outcome,
            onTimeout: () => pending
          })
        )
        const outcome =
          settled._tag === "Rejected"
            ? yield* usedAuthorization({
                payer,
                nonce: payload.payload.authorization.nonce,
                payTo: requirements.payTo,
                amountAtomic: BigInt(requirements.amount)
              }).pipe(
                Effect.map((chainSays) =>
                  chainSays !== "unused" && chainSays._tag === "Settled" ? chainSays : settled
                ),
                // Without the chain's word the failure is not certain: the reconciler asks again.
                Effect.orElseSucceed(() => pending)
              )
            : settled
        if (outcome._tag === "Pending") return yield* countSettlement("deferred").pipe(Effect.as(inProgress))
        const recorded = yield* Effect.exit(finish({ id: settlementId, orderId, payer }, outcome))
        // The receipt proves the transfer, recorded or not (the reconciler records it then).
        if (outcome._tag === "Settled") return outcome satisfies SettlementAnswer
        return Exit.isSuccess(recorded)
          ? ({
              _tag: "Failed",
              reason: outcome.reason,
              ...(outcome.transaction === undefined ? {} : { transaction: outcome.transaction })
            } satisfies SettlementAnswer)
          : inProgress
      }).pipe(
        Effect.catchAllCause((cause) =>
          Effect.logWarning("settlement in doubt: the reconciler continues it", cause).pipe(
            Effect.zipRight(countSettlement("deferred")),
            Effect.as(inProgress)
          )
        ),
        Effect.withSpan("Merchant.settleReserved", { attributes: { "order.id": orderId } })
      )

    const pay = traced("Merchant.pay")(function* (id: string, header: Option.Option<string>) {
      yield* Effect.annotateCurrentSpan("order.id", id)
      const order = yield* load(id)
      if (Option.isNone(header)) {
        if (order.status === "paid")
          return { order: toOrder(order), receipt: Option.none(), inProgress: false } satisfies PaidOrder
        if (order.status === "expired") return yield* new OrderExpired({ error: "the order expired" })
        if (order.status === "settling") return yield* new PaymentInProgress({ error: "a payment is being settled" })
        return yield* refuse(order, Reason.paymentRequired, "PAYMENT_REQUIRED")
      }
      const decoded = decodePaymentHeader(header.value)
      if (Either.isLeft(decoded)) return yield* refuse(order, decoded.left, "PAYMENT_INVALID")
      const payload = decoded.right
      const authorization = payload.payload.authorization
      // Stored and answered in checksum form, whatever case the client signed with.
      const payer = getAddress(authorization.from)
      yield* Effect.annotateCurrentSpan("payment.payer", payer)

      if (order.status === "paid") {
        // The same payment again (a client retry after a lost response): the same receipt.
        const settled = yield* repo.findSucceededSettlement(order.id)
        if (
          Option.isSome(settled) &&
          settled.value.payer.toLowerCase() === authorization.from.toLowerCase() &&
          settled.value.nonce === authorization.nonce.toLowerCase()
        ) {
          return {
            order: toOrder(order),
            receipt: Option.some(receiptOf(settled.value)),
            inProgress: false
          } satisfies PaidOrder
        }
        return yield* new OrderAlreadyPaid({ error: "the order was paid by another payment" })
      }
      if (order.status === "settling") return yield* new PaymentInProgress({ error: "a payment is being settled" })
      if (order.status === "expired") return yield* new OrderExpired({ error: "the order expired" })

      // Off-chain checks first, then the signature and the chain state; all before any reservation.
      if (!paysResource(payload, resourceOf(order).url)) {
        return yield* refuse(order, Reason.resourceMismatch, "PAYMENT_INVALID")
      }
      const requirements = requirementsOf(order)
      if (!matchesOffer(payload.accepted, requirements)) {
        return yield* refuse(order, Reason.noMatchingRequirements, "PAYMENT_INVALID")
      }
      const nowSeconds = Math.floor((yield* Clock.currentTimeMillis) / 1000)
      const window = checkAuthorization(authorization, requirements, nowSeconds)
      if (Either.isLeft(window)) return yield* refuse(order, window.left, "PAYMENT_INVALID")
      // A relayer that cannot pay the gas would leave the order settling with nothing sent (cached: no call).
      if (processor.recordsBeforeBroadcast && !(yield* chain.relayerFunded)) {
        return yield* new RelayerUnfunded({ error: "the relayer cannot pay gas now; nothing was reserved or sent" })
      }
      // The payer's settlements before the check: unchanged at the reservation, the check's simulated
      // transfer still holds when the relayer signs it (`verifiedStillHolds`).
      const settlementsBefore = processor.recordsBeforeBroadcast
        ? Option.some(yield* repo.payerSettlements({ payer, asset: usd1.address }))
        : Option.none()
      const verified = yield* withinChainTimeout(processor.verify(payload, requirements)).pipe(
        Effect.catchTag("ChainError", (error) =>
          // counted in the chain's outage from the 503 (Outages.ts); the detail at debug level
          Effect.logDebug(`payment not verified: ${error.message}`).pipe(
            Effect.zipRight(
              new ChainUnavailable({ error: "the chain did not answer in time; nothing was reserved or sent" })
            )
          )
        )
      )
      if (verified._tag === "Refused") return yield* refuse(order, verified.reason, "PAYMENT_INVALID")

      // From the reservation on, the settlement runs to its end whatever the request does (a
      // client that hangs up, a slow chain): the request waits up to SETTLEMENT_WAIT for it.
      const answer = yield* Effect.uninterruptibleMask((restore) =>
        Effect.gen(function* () {
          yield* track(id)
          const reserved = yield* Effect.exit(reserve(order, payload, verified.balance))
          if (Exit.isFailure(reserved))
            return yield* untrack(id).pipe(Effect.zipRight(Effect.failCause(reserved.cause)))
          const { settlementId, others } = reserved.value
          const verifiedStillHolds = Option.exists(
            settlementsBefore,
            (before) => before.unsettled === 0 && others.unsettled === 0 && others.settlements === before.settlements
          )
          const settling = yield* Effect.forkDaemon(
            restore(settleReserved(settlementId, id, payload, requirements, payer, verifiedStillHolds)).pipe(
              Effect.ensuring(untrack(id))
            )
          )
          return yield* restore(Fiber.join(settling)).pipe(
            Effect.timeoutTo({
              duration: settings.settlementWait,
              onSuccess: (answer) => answer,
              onTimeout: () => inProgress
            }),
            Effect.onInterrupt(() => Effect.logInfo("the client left; the settlement goes on"))
          )
        })
      )
      switch (answer._tag) {
        case "Settled":
          return {
            order: toOrder({ ...order, status: "paid", payer, tx: answer.transaction }),
            receipt: Option.some({ success: true, transaction: answer.transaction, network, payer }),
            inProgress: false
          } satisfies PaidOrder
        case "Failed":
          return yield* refuse(order, answer.reason, "SETTLEMENT_FAILED", {
            success: false,
            transaction: answer.transaction ?? "",
            network,
            payer,
            errorReason: answer.reason
          })
        case "InProgress":
          return {
            order: toOrder({ ...order, status: "settling" }),
            receipt: Option.none(),
            inProgress: true
          } satisfies PaidOrder
      }
    })

    /**
     * Decides one unfinished settlement from the chain; leaves it when the chain cannot tell yet.
     * False when the chain did not answer.
     */
    const reconcileOne = (settlement: SettlementRow) =>
      Effect.gen(function* () {
        const used = yield* usedAuthorization({ ...settlement, payTo: settlement.payload.accepted.payTo })
        if (used !== "unused") return used._tag === "Pending" ? undefined : yield* finish(settlement, used)
        if (settlement.txHash !== null) {
          const receipt = yield* chain.receipt(settlement.txHash as Hash, 2_000)
          // Mined after the authorization was read (a re-sent transaction may be mined meanwhile):
          // the receipt itself says whether it paid us.
          if (Option.isSome(receipt)) {
            const paid = receiptShowsTransfer(receipt.value, {
              token: usd1.address,
              from: settlement.payer,
              to: getAddress(settlement.payload.accepted.payTo),
              value: settlement.amountAtomic
            })
            return yield* finish(
              settlement,
              paid
                ? { _tag: "Settled", transaction: settlement.txHash as Hash }
                : revertedOnChain(settlement.txHash as Hash)
            )
          }
        }
        if ((yield* withinChainTimeout(chain.blockTime)) >= settlement.validBefore) {
          // The authorization can never execute any more: nothing was or will be charged.
          return yield* finish(settlement, { _tag: "Rejected", reason: Reason.validBefore })
        }
        if (settlement.rawTx !== null) {
          const resent = yield* withinChainTimeout(chain.rebroadcast(settlement.rawTx as Hex))
          // Its nonce went to another transaction: it can never be mined. The authorization is
          // unused, so the order reopens once it expires (above), not before.
          if (resent === "replaced") {
            yield* Effect.logWarning(
              `reconcile: transaction ${settlement.txHash} was replaced; waiting for its authorization to expire`
            )
          }
          return
        }
        if (settlement.txHash === null && processor.recordsBeforeBroadcast) {
          // Our relayer records a transaction before broadcasting it: no record, nothing sent.
          return yield* finish(settlement, { _tag: "Rejected", reason: Reason.unexpectedSettleError })
        }
      }).pipe(
        Effect.as(true),
        Effect.catchTag("ChainError", (error) =>
          reportUnavailable("chain", `reconcile: ${error.message}`, "job").pipe(Effect.as(false))
        ),
        Effect.catchAllCause((cause) => {
          const outage = outageOf(cause)
          return (
            Option.isSome(outage)
              ? reportUnavailable(outage.value.dependency, `reconcile: ${outage.value.reason}`, "job")
              : Effect.logWarning("reconcile: will retry", cause)
          ).pipe(Effect.as(true))
        }),
        Effect.withSpan("Merchant.reconcileOne", { attributes: { "order.id": settlement.orderId } })
      )

    /** Finishes the settlements nobody works on any more (see `lockAbandoned`). Safe on every replica. */
    const reconcile = Effect.gen(function* () {
      // The working set, and when it was taken: a settlement reserved after it is not in it yet.
      const workingAt = new Date(yield* Clock.currentTimeMillis)
      const rows = yield* repo.claimAbandoned({
        replica,
        working: [...working.keys()],
        workingAt,
        leaseSeconds: Duration.toSeconds(settings.reconcileAfter),
        limit: 20
      })
      // Each row bounded by the chain client's own limits; one that cannot be decided now waits for
      // its turn again (claimed after the others), it does not hold the rest of the batch.
      const decided = yield* Effect.forEach(rows, reconcileOne, { concurrency: RECONCILED_AT_ONCE })
      const reconciled = decided.filter(Boolean).length
      if (reconciled > 0) yield* Effect.logInfo(`reconciled ${reconciled} unfinished settlement(s)`)
    }).pipe(Effect.withSpan("Merchant.reconcile"))

    type Tracked = (typeof repo.unfinalTransactions extends (
      ...args: never
    ) => Effect.Effect<infer A, infer _E, infer _R>
      ? A
      : never)[number]

    /**
     * A journaled transaction of a paid (or settling) order, checked against the canonical chain:
     * mined (final once CONFIRMATIONS deep), or no longer there. One the chain lost after it was seen
     * mined (a reorg, a node restored from an older state) is sent again byte-identical while its
     * authorization is valid. Once the authorization expired with the transfer nowhere on chain, the
     * transaction is dropped and a paid order is unpaid again (`undoLost`): the payer was not charged.
     */
    const checkTransaction = (row: Tracked, head: { readonly number: bigint; readonly time: bigint }) =>
      Effect.gen(function* () {
        const now = new Date(yield* Clock.currentTimeMillis)
        const receipt = yield* minedVersion([row.txHash, ...row.versions] as ReadonlyArray<Hash>)
        if (Option.isSome(receipt) && receipt.value.hash !== row.txHash) {
          // An earlier signature of the nonce was mined, not the last fee bump: it is the settlement's.
          yield* repo.promoteVersion(row.txHash, receipt.value.hash, now)
          yield* Effect.logInfo("an earlier fee of a bumped settlement transaction was mined").pipe(
            Effect.annotateLogs({ "order.id": row.orderId, "tx.hash": receipt.value.hash })
          )
        }
        const hash = Option.match(receipt, { onNone: () => row.txHash as Hash, onSome: (mined) => mined.hash })
        if (Option.isSome(receipt)) {
          const { blockNumber, blockHash } = receipt.value
          const status = isFinal(blockNumber, head.number, confirmations) ? "final" : "mined"
          if (row.status === "mined" && row.blockHash !== blockHash) {
            yield* Effect.logInfo(`settlement transaction mined again, in block ${blockNumber}`).pipe(
              Effect.annotateLogs({ "order.id": row.orderId, "tx.hash": hash })
            )
          }
          return yield* repo.markTransaction(hash, { status, blockNumber, blockHash }, now)
        }
        if (head.time < row.validBefore) {
          if (row.status === "mined") {
            yield* Effect.logWarning(
              "settlement transaction no longer on chain; sending the same transaction again"
            ).pipe(
              Effect.annotateLogs({ "order.id": row.orderId, "tx.hash": hash }),
              Effect.zipRight(countLostTransaction)
            )
            yield* withinChainTimeout(chain.rebroadcast(row.rawTx as Hex))
          } else if (row.settlementStatus === "broadcast") {
            yield* replaceIfStuck(row, now)
          }
          return yield* repo.markTransaction(hash, { status: "pending" }, now)
        }
        yield* repo.markTransaction(hash, { status: "dropped" }, now)
        if (row.settlementStatus === "succeeded") yield* undoLost(row, now)
      })

    /** The receipt of the first of a nonce's signed versions found mined. */
    const minedVersion = (hashes: ReadonlyArray<Hash>) =>
      Effect.gen(function* () {
        for (const hash of hashes) {
          const receipt = yield* chain.receipt(hash, 0)
          if (Option.isSome(receipt)) return receipt
        }
        return Option.none<Receipt>()
      })

    /**
     * A settlement transaction not mined RELAYER_STUCK_AFTER after it was signed gets the same nonce
     * with a higher fee (`ChainClient.replaceStuck`), journaled as a new version before it is sent.
     */
    const replaceIfStuck = (row: Tracked, now: Date) =>
      chain
        .replaceStuck(
          { sender: row.sender, raw: row.rawTx as Hex, signedAt: row.createdAt, bumps: row.versions.length },
          (signed) =>
            repo
              .recordBump(
                row.settlementId,
                row.txHash,
                { hash: signed.hash, raw: signed.raw, sender: signed.sender, nonce: signed.nonce },
                now
              )
              .pipe(Effect.flatMap((recorded) => (recorded === "recorded" ? Effect.void : new SettlementAbandoned())))
        )
        .pipe(
          Effect.flatMap(
            Option.match({
              onNone: () => Effect.void,
              onSome: (signed) =>
                Effect.logWarning(
                  `settlement transaction not mined in time: replaced with the same nonce ${signed.nonce} and a higher fee (bump ${row.versions.length + 1})`
                ).pipe(
                  Effect.annotateLogs({ "order.id": row.orderId, "tx.hash": signed.hash, "tx.replaced": row.txHash }),
                  Effect.zipRight(countFeeBump)
                )
            })
          ),
          // mined or decided meanwhile: the next tick sees it
          Effect.catchTag("SettlementAbandoned", () => Effect.void)
        )

    /**
     * A paid order whose transaction is gone for good: unless another transaction used the
     * authorization and paid us, the settlement fails and the order is unpaid again.
     */
    const undoLost = (row: Tracked, now: Date) =>
      Effect.gen(function* () {
        const used = yield* usedAuthorization({ ...row, payTo: row.payload.accepted.payTo })
        if (used !== "unused") return
        const undone = yield* repo.undoLostSettlement(row.settlementId, Reason.transactionLost, now)
        if (Option.isSome(undone)) {
          yield* Effect.logWarning(
            `a paid order's transfer is no longer on chain and its authorization expired: the order is ${undone.value.status} again, the payer was not charged`
          ).pipe(Effect.annotateLogs({ "order.id": row.orderId, "payment.payer": row.payer, "tx.hash": row.txHash }))
        }
      })

    /**
     * The relayer follows the chain: its nonce is compared with the chain's count (a gap closed
     * from the journal), then the journaled transactions not final yet are checked, least recently
     * checked first. A chain that does not answer ends the tick.
     */
    const followChain = Effect.gen(function* () {
      if (!processor.recordsBeforeBroadcast) return
      yield* chain.followRelayerNonce(resendable)
      const rows = yield* repo.unfinalTransactions({ senders: chain.relayers, limit: TRACKED_PER_TICK })
      if (rows.length === 0) return
      // The watcher's head (a poll old at most: a transaction is final, or its authorization expired,
      // a poll later at worst), not a read per tick and per transaction.
      const head = yield* withinChainTimeout(chain.watchedHead)
      for (const row of rows) yield* checkTransaction(row, head)
    }).pipe(
      Effect.catchTag("ChainError", (error) => reportUnavailable("chain", `relayer tracker: ${error.message}`, "job")),
      Effect.withSpan("Merchant.followChain")
    )

    /**
     * The relayer's nonce checked as soon as the chain gives a reason (`relayerNonceAlarm`: a head
     * that went back, a receipt late, a transaction queued), not at the next tracker tick.
     */
    const followAlarm = Effect.gen(function* () {
      const why = yield* chain.relayerNonceAlarm
      if (!processor.recordsBeforeBroadcast) return
      yield* Effect.logInfo(`relayer nonce check now: ${why}`)
      yield* chain.followRelayerNonce(resendable)
    }).pipe(
      Effect.catchTag("ChainError", (error) =>
        reportUnavailable("chain", `relayer nonce check: ${error.message}`, "job")
      ),
      Effect.withSpan("Merchant.followAlarm")
    )

    /** Why the relayer is stuck, for /ready: settlements without a receipt past SETTLEMENT_STUCK_AFTER. */
    const stuckSettlements = repo
      .countStuckSettlements(Duration.toSeconds(settings.stuckAfter))
      .pipe(
        Effect.map((stuck) =>
          stuck > 0
            ? Option.some(`${stuck} settlement(s) without a receipt for over ${Duration.format(settings.stuckAfter)}`)
            : Option.none()
        )
      )

    /** Tells the other replicas this one is alive (its settlements are not theirs to take over). */
    const heartbeat = repo.heartbeat(replica).pipe(Effect.asVoid, Effect.withSpan("Merchant.heartbeat"))

    return {
      createOrder,
      getOrder,
      pay,
      reconcile,
      followChain,
      followAlarm,
      stuckSettlements,
      heartbeat,
      reconcileInterval: settings.reconcileInterval,
      heartbeatInterval: Duration.times(settings.reconcileAfter, 1 / 3)
    }
  }),
  dependencies: [OrderRepo.Default]
}) {}

/**
 * The reconciler and the relayer's tracker, at start-up and then every RECONCILE_INTERVAL, and the
 * replica's heartbeat, every third of SETTLEMENT_RECONCILE_AFTER; on every replica.
 */
export const SettlementReconcilerLive = Layer.mergeAll(
  backgroundLoop(
    "settlement-heartbeat",
    Effect.map(Merchant, (merchant) => ({ tick: merchant.heartbeat, every: merchant.heartbeatInterval }))
  ),
  backgroundLoop(
    "settlement-reconciler",
    Effect.map(Merchant, (merchant) => ({ tick: merchant.reconcile, every: merchant.reconcileInterval }))
  ),
  backgroundLoop(
    "relayer-nonce-alarm",
    Effect.map(Merchant, (merchant) => ({ tick: merchant.followAlarm, every: Duration.zero }))
  ),
  backgroundLoop(
    "relayer-tracker",
    Effect.map(Merchant, (merchant) => ({ tick: merchant.followChain, every: merchant.reconcileInterval }))
  )
)
