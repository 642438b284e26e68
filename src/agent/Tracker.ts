/**
 * Finality of the agent's transactions: every succeeded step followed until CHAIN_CONFIRMATIONS
 * deep; one the chain lost (a reorg) is sent again byte-identical, and one that cannot be mined
 * again undoes the decision when it was the step that delivered the money (docs/agent.md). A
 * repayment whose decision ended before it was seen mined is settled here: recorded with the card
 * program once mined, failed once reverted.
 */
import { Clock, Effect, Option } from "effect"
import type { Hash, Hex } from "viem"
import { ChainClient, chainConfirmations, isFinal, withinChainTimeout } from "../chain/ChainClient.js"
import { countAgentDecision, countLostAgentTransaction } from "../observability/Metrics.js"
import { reportUnavailable } from "../observability/Outages.js"
import { AppConfig } from "../runtime/Config.js"
import { AgentRepo, type TrackedTransaction } from "./AgentRepo.js"

/** Transactions the tracker checks per tick, least recently checked first. */
const TRACKED_PER_TICK = 50

/**
 * The tracker's tick; `publishDecisions` tells a card's holder of a decision undone, `recordRepayment`
 * records a decision's mined repayment with the card program (idempotent).
 */
export const makeTracker = (trades: {
  readonly publishDecisions: (ids: ReadonlyArray<string>) => Effect.Effect<void>
  readonly recordRepayment: (decisionId: string, at: Date) => Effect.Effect<void>
}) =>
  Effect.gen(function* () {
    const repo = yield* AgentRepo
    const chain = yield* ChainClient
    const { chainTimeout } = yield* AppConfig
    const confirmations = yield* chainConfirmations(chain)
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))
    const withinChainTime = withinChainTimeout(chainTimeout)

    /** The step that puts a decision's money where it goes: a refill's send, a rebalance's purchase. */
    const delivers = (tx: TrackedTransaction) => tx.step === (tx.action === "refill" ? "send" : "buy")

    /**
     * A transaction the chain lost that cannot be mined again. The delivering step lost: the decision
     * is failed (the card did not get the refill, the statement no longer shows it, a `decision`
     * event says so). An earlier step (the sale) lost: the steps after it spent the wallet's own
     * USD1 instead; the decision stands.
     */
    const lose = (tx: TrackedTransaction, why: string, at: Date) =>
      Effect.gen(function* () {
        if (!(yield* repo.dropTransaction(tx.decisionId, tx.step, at))) return
        const lost = `the ${tx.step} transaction ${tx.hash} was lost by the chain and ${why}`
        if (tx.step === "approve") {
          return yield* Effect.logWarning(
            `agent ${tx.action}: ${lost}; the wallet's next trade approves the exchange again`
          )
        }
        if (tx.step === "repay") {
          // Not undone here (issue 38 follow-up): the reconciliation reports the card program short of it.
          return yield* Effect.logWarning(
            `agent refill: ${lost}; the repayment recorded when it was first mined stands: the card program is short of it`
          )
        }
        if (!delivers(tx)) {
          return yield* Effect.logWarning(`agent ${tx.action}: ${lost}; the wallet's own USD1 paid the steps after it`)
        }
        const failed = yield* repo.failLostDecision(tx.decisionId, lost, at).pipe(
          Effect.tap((failed) => (failed ? trades.publishDecisions([tx.decisionId]) : Effect.void)),
          repo.withTransaction
        )
        if (failed) {
          yield* countAgentDecision(tx.action, "failed")
          yield* Effect.logWarning(`agent ${tx.action} undone: ${lost}; the decision is failed`)
        }
      }).pipe(Effect.annotateLogs({ "card.id": tx.cardId, "decision.id": tx.decisionId, "tx.hash": tx.hash }))

    /**
     * A succeeded transaction checked against the canonical chain: in a block (final once
     * CHAIN_CONFIRMATIONS deep), or gone (a reorg, a node restored from an older state), then sent
     * again byte-identical: same hash, same nonce, so it can only ever be mined once.
     */
    const checkTransaction = (tx: TrackedTransaction, head: bigint, at: Date) =>
      Effect.gen(function* () {
        const hash = tx.hash as Hash
        const receipt = yield* withinChainTime(chain.receipt(hash, 0))
        if (Option.isSome(receipt)) {
          if (receipt.value.status === "reverted") return yield* lose(tx, "reverted when mined again", at)
          const { blockNumber, blockHash } = receipt.value
          if (tx.finality === "pending") {
            yield* Effect.logInfo(`agent ${tx.step} transaction mined again, in block ${blockNumber}`).pipe(
              Effect.annotateLogs({ "decision.id": tx.decisionId, "tx.hash": hash })
            )
          }
          const finality = isFinal(blockNumber, head, confirmations) ? "final" : "mined"
          return yield* repo.markTransaction(tx.decisionId, tx.step, { finality, blockNumber, blockHash }, at)
        }
        if (tx.finality === "mined") {
          yield* Effect.logWarning(
            `agent ${tx.step} transaction no longer on chain; sending the same transaction again`
          ).pipe(
            Effect.annotateLogs({ "card.id": tx.cardId, "decision.id": tx.decisionId, "tx.hash": hash }),
            Effect.zipRight(countLostAgentTransaction)
          )
        }
        const resent = yield* withinChainTime(chain.rebroadcast(tx.raw as Hex))
        if (resent === "replaced") return yield* lose(tx, "its nonce went to another transaction", at)
        yield* repo.markTransaction(tx.decisionId, tx.step, { finality: "pending" }, at)
      })

    /**
     * Repayments whose decision ended before they were seen mined (it went `unknown`): mined since,
     * the step succeeds and the card program records it, in one transaction; reverted or replaced
     * at its nonce, it failed; not known to the node, it is sent again byte-identical.
     */
    const settleRepayment = (row: { readonly decisionId: string; readonly hash: string; readonly raw: string }) =>
      Effect.gen(function* () {
        const at = yield* now
        const receipt = yield* withinChainTime(chain.receipt(row.hash as Hash, 0))
        if (Option.isNone(receipt)) {
          const resent = yield* withinChainTime(chain.rebroadcast(row.raw as Hex))
          if (resent === "replaced") yield* repo.finishTransaction(row.decisionId, "repay", { status: "failed" }, at)
          return
        }
        if (receipt.value.status === "reverted") {
          return yield* repo.finishTransaction(row.decisionId, "repay", { status: "failed" }, at)
        }
        const { blockHash, blockNumber } = receipt.value
        yield* repo
          .finishTransaction(row.decisionId, "repay", { status: "succeeded", blockNumber, blockHash }, at)
          .pipe(Effect.zipRight(trades.recordRepayment(row.decisionId, at)), repo.withTransaction)
        yield* Effect.logInfo("agent repayment mined after its decision ended; recorded")
      }).pipe(
        // One the node keeps refusing stays in doubt (its amount is not repaid again) and stops no other check.
        Effect.catchTag("ChainError", (error) =>
          Effect.logWarning(`agent repayment in doubt not settled: ${error.message}`)
        ),
        Effect.annotateLogs({ "decision.id": row.decisionId, "tx.hash": row.hash })
      )
    const settleRepayments = Effect.flatMap(repo.repaymentsInDoubt(TRACKED_PER_TICK), (rows) =>
      Effect.forEach(rows, settleRepayment, { discard: true })
    )

    /**
     * Checks the succeeded transactions not final yet, least recently checked first, at most
     * TRACKED_PER_TICK, each wallet's in nonce order (a sale sent again before the send that spends
     * it). No row lock is held: every write is conditional. A chain that does not answer ends the tick.
     */
    const followChain = Effect.gen(function* () {
      yield* settleRepayments
      const rows = yield* repo.unfinalTransactions(TRACKED_PER_TICK)
      if (rows.length === 0) return
      // The block watcher's head (as the settlement tracker's): no read of its own per tick.
      const head = (yield* withinChainTime(chain.watchedHead)).number
      const at = yield* now
      const ordered = [...rows].sort((a, b) => a.sender.localeCompare(b.sender) || a.nonce - b.nonce)
      for (const tx of ordered) yield* checkTransaction(tx, head, at)
    }).pipe(
      Effect.catchTag("ChainError", (error) => reportUnavailable("chain", `agent tracker: ${error.message}`, "job")),
      Effect.withSpan("AgentLoop.followChain")
    )
    return followChain
  })
