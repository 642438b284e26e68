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
 *
 * This file is the order service and its pay path, and assembles beside them the reconciler
 * (Reconciler.ts) and the relayer's tracker (RelayerTracker.ts), which share this replica's working
 * set and the settlement outcome (Settlement.ts). One unit at ~500 lines because `pay` is one
 * request's path from its header to its answer: its steps (refuse, reserve, settle) share the
 * order's requirements, the working set and the answer they build.
 */
import { randomBytes, randomUUID } from "node:crypto"
import { Clock, Duration, Effect, Either, Exit, Fiber, Layer, Option } from "effect"
import { domainSeparator, getAddress, type Hash } from "viem"
import type { Address } from "../chain/Address.js"
import { ChainClient, type ChainClientShape, chainConfirmations } from "../chain/ChainClient.js"
import { ChainUnavailable } from "../http/ApiError.js"
import { forkLoop, type Loop } from "../lifecycle/BackgroundLoop.js"
import { countSettlement } from "../observability/Metrics.js"
import { traced } from "../observability/Traced.js"
import { AppConfig } from "../runtime/Config.js"
import {
  Order,
  OrderAlreadyPaid,
  OrderExpired,
  OrderNotFound,
  PaymentInProgress,
  PaymentRequired,
  RelayerPricedOut,
  RelayerUnfunded
} from "./Api.js"
import { merchantSettings } from "./MerchantSettings.js"
import { microsToAtomic, orderTag, parseAmount } from "./Money.js"
import { orderFields } from "./OrderJson.js"
import { OrderRepo, type OrderRow, type SettlementRow } from "./OrderRepo.js"
import { type BroadcastRecord, PaymentProcessor, SettlementAbandoned, type SettleOutcome } from "./PaymentProcessor.js"
import { settlementReconciler } from "./Reconciler.js"
import { relayerTracker } from "./RelayerTracker.js"
import { settlementOutcomes } from "./Settlement.js"
import {
  checkAuthorization,
  checkResource,
  decodePaymentHeader,
  matchesOffer,
  type PaymentPayload,
  type PaymentRequirements,
  paymentRequired,
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
  new Order({ ...orderFields(row), ...extra }, true)

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
    const { apiUrl, merchantPayTo } = yield* AppConfig
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

    const outcomes = yield* settlementOutcomes
    const { withinChainTimeout, finish, usedAuthorization, resendable } = outcomes

    const requirementsOf = (row: OrderRow): PaymentRequirements =>
      requirementsFor({
        chainId: chain.chainId,
        asset: usd1.address,
        payTo,
        // The order's own value below a micro-dollar: its authorization pays no other order.
        amountAtomic: microsToAtomic(row.amountMicros, usd1.decimals) + orderTag(row.id, usd1.decimals),
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

    /** The order, with a due expiry applied first, read by `read` (with what else it reads). */
    const loadWith = <A extends { readonly justExpired: boolean }, E, R>(
      id: string,
      read: (now: Date) => Effect.Effect<Option.Option<A>, E, R>
    ) =>
      Effect.gen(function* () {
        const row = yield* read(new Date(yield* Clock.currentTimeMillis))
        if (Option.isNone(row)) return yield* new OrderNotFound({ error: `no order ${id}` })
        const { justExpired, ...order } = row.value
        if (justExpired) yield* Effect.logInfo("order expired").pipe(Effect.annotateLogs("order.id", id))
        return order
      })
    const load = (id: string) => loadWith(id, (now) => repo.loadOrder({ id, now }))

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
     * Settles a reserved payment and records the outcome; never fails. A refused or reverted
     * transfer may be moot: the authorization can have been used by another transaction paying us
     * the same amount (anyone may submit it), so the chain has the last word.
     */
    const settleReserved = (
      settlementId: number,
      order: OrderRow,
      payload: PaymentPayload,
      requirements: PaymentRequirements,
      payer: Address,
      verifiedStillHolds: boolean
    ) =>
      Effect.gen(function* () {
        const orderId = order.id
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
        const recorded = yield* Effect.exit(finish({ id: settlementId, orderId, payer }, outcome, order))
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
        Effect.withSpan("Merchant.settleReserved", { attributes: { "order.id": order.id } })
      )

    const pay = traced("Merchant.pay")(function* (id: string, header: Option.Option<string>) {
      yield* Effect.annotateCurrentSpan("order.id", id)
      const decoded = Option.map(header, decodePaymentHeader)
      const signedBy = Option.flatMap(decoded, Either.getRight).pipe(
        // Stored and answered in checksum form, whatever case the client signed with.
        Option.map((payload) => getAddress(payload.payload.authorization.from))
      )
      // The payer's settlements before the check, read with the order (one statement): unchanged at
      // the reservation, the check's simulated transfer still holds when the relayer signs it
      // (`verifiedStillHolds`).
      const { newest, unsettled, ...order } =
        processor.recordsBeforeBroadcast && Option.isSome(signedBy)
          ? yield* loadWith(id, (now) =>
              repo.loadOrderForPayer({ id, now, payer: signedBy.value, asset: usd1.address })
            )
          : { ...(yield* load(id)), newest: undefined, unsettled: undefined }
      const settlementsBefore =
        newest === undefined || unsettled === undefined ? Option.none() : Option.some({ newest, unsettled })
      if (Option.isNone(decoded)) {
        if (order.status === "paid")
          return { order: toOrder(order), receipt: Option.none(), inProgress: false } satisfies PaidOrder
        if (order.status === "expired") return yield* new OrderExpired({ error: "the order expired" })
        if (order.status === "settling") return yield* new PaymentInProgress({ error: "a payment is being settled" })
        return yield* refuse(order, Reason.paymentRequired, "PAYMENT_REQUIRED")
      }
      if (Either.isLeft(decoded.value)) return yield* refuse(order, decoded.value.left, "PAYMENT_INVALID")
      const payload = decoded.value.right
      const authorization = payload.payload.authorization
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
      const resource = checkResource(payload, resourceOf(order).url)
      if (Either.isLeft(resource)) return yield* refuse(order, resource.left, "PAYMENT_INVALID")
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
      // Above the fee cap the relayer holds at most its in-flight bound of waiting settlements: one
      // more would be reserved only to wait for a slot.
      if (processor.recordsBeforeBroadcast && (yield* chain.relayerPricedOut)) {
        return yield* new RelayerPricedOut({
          error:
            "the chain's base fee is above MAX_FEE_PER_GAS and the relayer holds as many waiting settlements as it " +
            "may; nothing was reserved or sent"
        })
      }
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
            (before) => before.unsettled === 0 && others.unsettled === 0 && others.newest === before.newest
          )
          const settling = yield* Effect.forkDaemon(
            restore(settleReserved(settlementId, order, payload, requirements, payer, verifiedStillHolds)).pipe(
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

    const { reconcile, stuckSettlements, heartbeat } = yield* settlementReconciler({
      replica,
      working: () => [...working.keys()],
      settings,
      outcomes
    })
    const { followChain, followAlarm, followNonceAtStart } = yield* relayerTracker(confirmations, outcomes)

    /**
     * This replica stops: once none of its fibers settles anything (a request answered 202 leaves one
     * going), its heartbeat goes, so that the other replicas (or this service started again) take over
     * its unfinished settlements at once rather than after SETTLEMENT_RECONCILE_AFTER. A fiber still
     * settling when the wait is cut (BackgroundLoop's bound) keeps the heartbeat: it expires as before.
     */
    const leave = Effect.gen(function* () {
      while (working.size > 0) yield* Effect.sleep("20 millis")
      yield* repo.forgetReplica(replica)
    })

    return {
      createOrder,
      getOrder,
      pay,
      reconcile,
      followChain,
      followAlarm,
      followNonceAtStart,
      stuckSettlements,
      heartbeat,
      leave,
      reconcileInterval: settings.reconcileInterval,
      heartbeatInterval: Duration.times(settings.reconcileAfter, 1 / 3)
    }
  }),
  dependencies: [OrderRepo.Default]
}) {}

/**
 * The reconciler and the relayer's tracker, at start-up and then every RECONCILE_INTERVAL, and the
 * replica's heartbeat, every third of SETTLEMENT_RECONCILE_AFTER (gone when the replica stops); on
 * every replica. Each loop is its
 * own fiber, named for its logs and spans.
 */
const settlementLoops: ReadonlyArray<readonly [name: string, loop: (merchant: Merchant) => Loop<unknown, never>]> = [
  [
    "settlement-heartbeat",
    (merchant) => ({ tick: merchant.heartbeat, every: merchant.heartbeatInterval, release: merchant.leave })
  ],
  ["settlement-reconciler", (merchant) => ({ tick: merchant.reconcile, every: merchant.reconcileInterval })],
  ["relayer-nonce-alarm", (merchant) => ({ tick: merchant.followAlarm, every: Duration.zero })],
  ["relayer-tracker", (merchant) => ({ tick: merchant.followChain, every: merchant.reconcileInterval })]
]

export const SettlementReconcilerLive = Layer.scopedDiscard(
  Effect.gen(function* () {
    const merchant = yield* Merchant
    const { chainTimeout } = yield* AppConfig
    // Before the HTTP server listens (the API is built on this layer): the first payments find the
    // relayer's nonce known, instead of each worker's first one waiting while a journal is replayed.
    // The start waits at most CHAIN_TIMEOUT for it; a longer replay goes on meanwhile.
    const catchUp = yield* Effect.forkScoped(merchant.followNonceAtStart)
    yield* Fiber.await(catchUp).pipe(Effect.timeoutOption(chainTimeout))
    yield* Effect.forEach(settlementLoops, ([name, loop]) => forkLoop(name, loop(merchant)), { discard: true })
  })
)
