/**
 * The settlement reconciler: finishes the settlements nobody works on any more (a replica that
 * died, a request that let go) from the chain's word, and the replica's heartbeat that keeps its
 * own settlements its own. Safe on every replica.
 */
import { Clock, Duration, Effect, Option } from "effect"
import { getAddress, type Hash, type Hex } from "viem"
import { ChainClient, receiptShowsTransfer } from "../chain/ChainClient.js"
import { outageOf, reportUnavailable } from "../observability/Outages.js"
import type { MerchantSettings } from "./MerchantSettings.js"
import { OrderRepo, type SettlementRow } from "./OrderRepo.js"
import { PaymentProcessor, revertedOnChain } from "./PaymentProcessor.js"
import type { SettlementOutcomes } from "./Settlement.js"
import { Reason } from "./X402.js"

/** Unfinished settlements the reconciler asks the chain about at once. */
const RECONCILED_AT_ONCE = 5

export interface ReconcilerOptions {
  /** This replica, as the owner of the settlements it reserves. */
  readonly replica: string
  /** The orders this replica's requests are settling now. */
  readonly working: () => ReadonlyArray<string>
  readonly settings: MerchantSettings
  readonly outcomes: SettlementOutcomes
}

export const settlementReconciler = ({ replica, working, settings, outcomes }: ReconcilerOptions) =>
  Effect.gen(function* () {
    const repo = yield* OrderRepo
    const chain = yield* ChainClient
    const processor = yield* PaymentProcessor
    const { usd1 } = chain
    const { finish, usedAuthorization, withinChainTimeout } = outcomes

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
          // the receipt itself says whether it paid us. It is the mined version's, which is not the
          // one recorded when an earlier fee of a bumped transaction was mined.
          if (Option.isSome(receipt)) {
            const mined = receipt.value
            const paid = receiptShowsTransfer(mined, {
              token: usd1.address,
              from: settlement.payer,
              to: getAddress(settlement.payload.accepted.payTo),
              value: settlement.amountAtomic
            })
            return yield* finish(
              settlement,
              paid ? { _tag: "Settled", transaction: mined.hash } : revertedOnChain(mined.hash)
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
        working: working(),
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

    return { reconcile, stuckSettlements, heartbeat }
  })
