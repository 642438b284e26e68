/**
 * A settlement's outcome, shared by the pay request, the reconciler and the relayer's tracker:
 * what the chain says about an authorization, the final state recorded once (with its log line,
 * counter and the payer's event), and the journaled transactions a nonce gap may send again.
 */
import { Clock, Effect, Option } from "effect"
import { getAddress, type Hex } from "viem"
import { activityItem } from "../cards/Statement.js"
import type { Address } from "../chain/Address.js"
import {
  ChainClient,
  type Resendable,
  receiptShowsTransfer,
  withinChainTimeout as withinChainTimeoutOf
} from "../chain/ChainClient.js"
import { Events } from "../events/Events.js"
import { countRevertedSettlement, countSettlement } from "../observability/Metrics.js"
import { AppConfig } from "../runtime/Config.js"
import { OrderRepo, type OrderRow } from "./OrderRepo.js"
import type { SettleOutcome } from "./PaymentProcessor.js"
import { Reason } from "./X402.js"

/** What a payment's event tells of its order, known to the request that reserved it. */
export type PaidOrderFacts = Pick<OrderRow, "id" | "amountMicros" | "description">

export const settlementOutcomes = Effect.gen(function* () {
  const repo = yield* OrderRepo
  const chain = yield* ChainClient
  const events = yield* Events
  const { chainTimeout } = yield* AppConfig
  const { usd1 } = chain

  /** A chain read that does not answer within CHAIN_TIMEOUT fails like an unreachable chain. */
  const withinChainTimeout = withinChainTimeoutOf(chainTimeout)

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

  /** The payer's `payment` event (a payer who is a user) of an order paid at `paidAt` by `tx`. */
  const paymentEvent = (order: PaidOrderFacts, paidAt: Date, tx: string) =>
    ({
      type: "payment",
      data: activityItem({ ...order, type: "payment", at: paidAt, tx })
    }) as const

  /**
   * A final state for a settlement and its order; idempotent. Whoever records it (the paying
   * request or the reconciler) says so once. A payment records the payer's event with it, in one
   * transaction; in one statement when the caller knows the order (`order`: the paying request).
   */
  const finish = (
    settlement: { readonly id: number; readonly orderId: string; readonly payer: Address },
    outcome: SettleOutcome,
    order?: PaidOrderFacts
  ) =>
    Effect.gen(function* () {
      const now = new Date(yield* Clock.currentTimeMillis)
      const recorded =
        outcome._tag === "Settled"
          ? order === undefined
            ? yield* repo
                .finishSettlement(settlement.id, { status: "succeeded", txHash: outcome.transaction }, now)
                .pipe(
                  Effect.tap((paid) =>
                    Option.match(paid, {
                      onNone: () => Effect.void,
                      onSome: (row) => events.publish(row.payer!, paymentEvent(row, row.paidAt!, row.tx!))
                    })
                  ),
                  repo.withTransaction
                )
            : yield* repo.finishSettlement(
                settlement.id,
                { status: "succeeded", txHash: outcome.transaction },
                now,
                (paidNow) => events.publishing(settlement.payer, paymentEvent(order, now, outcome.transaction), paidNow)
              )
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

  return { withinChainTimeout, finish, usedAuthorization, resendable }
})

export type SettlementOutcomes = Effect.Effect.Success<typeof settlementOutcomes>
