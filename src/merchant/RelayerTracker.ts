/**
 * The relayer's tracker: the relayer's nonce kept in step with the chain (a gap closed from the
 * journal, at once when the chain gives a reason), and each journaled settlement transaction
 * followed until it is final: re-sent when a reorg lost it, replaced with a higher fee when stuck,
 * the order unpaid again when its transfer is gone for good.
 */
import { Clock, Effect, Option } from "effect"
import type { Hash, Hex } from "viem"
import { ChainClient, isFinal, type Receipt } from "../chain/ChainClient.js"
import { countFeeBump, countLostTransaction } from "../observability/Metrics.js"
import { reportUnavailable } from "../observability/Outages.js"
import { OrderRepo } from "./OrderRepo.js"
import { PaymentProcessor, SettlementAbandoned } from "./PaymentProcessor.js"
import type { SettlementOutcomes } from "./Settlement.js"
import { Reason } from "./X402.js"

/** Journaled transactions the tracker checks per tick, least recently checked first. */
const TRACKED_PER_TICK = 50

export const relayerTracker = (confirmations: bigint, outcomes: SettlementOutcomes) =>
  Effect.gen(function* () {
    const repo = yield* OrderRepo
    const chain = yield* ChainClient
    const processor = yield* PaymentProcessor
    const { usedAuthorization, resendable, withinChainTimeout } = outcomes

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
    /** The relayer's nonce compared with the chain's count: a gap closed from the journal. */
    const followNonce = processor.recordsBeforeBroadcast
      ? Effect.asVoid(chain.followRelayerNonce(resendable))
      : Effect.void

    const followChain = Effect.gen(function* () {
      if (!processor.recordsBeforeBroadcast) return
      yield* followNonce
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
      yield* followNonce
    }).pipe(
      Effect.catchTag("ChainError", (error) =>
        reportUnavailable("chain", `relayer nonce check: ${error.message}`, "job")
      ),
      Effect.withSpan("Merchant.followAlarm")
    )

    /**
     * Before the service takes payments: the relayer's first send would otherwise wait in its queue
     * for this (every journaled transaction above the chain's count sent again, in order). What
     * fails here is the tracker's first tick's to report, right after.
     */
    const followNonceAtStart = followNonce.pipe(Effect.ignore, Effect.withSpan("Merchant.followNonceAtStart"))

    return { followChain, followAlarm, followNonceAtStart }
  })
