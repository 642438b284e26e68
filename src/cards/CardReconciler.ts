/**
 * The card program's reconciliation (docs/cards.md, "Reconciliation"): gathers the facts (the
 * database in one read-only transaction, then the chain: the settlement account's USD1 and the
 * receipt of every mined transfer and repayment, a bounded number at a time, each read within
 * CHAIN_TIMEOUT) and hands them to the pure `reconcile`. `npm run cards:reconcile` runs it once and
 * prints the summary; every replica also runs it every CARD_RECONCILE_INTERVAL and exports it as
 * gauges (`CardReconcileLive`).
 */
import { Clock, Config, Duration, Effect } from "effect"
import type { Hash } from "viem"
import { ChainClient, withinChainTimeout } from "../chain/ChainClient.js"
import { backgroundLoop } from "../lifecycle/BackgroundLoop.js"
import { setCardReconciliation } from "../observability/Metrics.js"
import { AppConfig, durationConfig } from "../runtime/Config.js"
import { CardProgram } from "./CardProgram.js"
import { DIFFERENCE_KINDS, type MinedReceipt, receiptsToRead, reconcile } from "./Reconciliation.js"
import { ReconciliationRepo } from "./ReconciliationRepo.js"

export const reconcileSettings = Config.all({
  /** How often each replica reconciles in the background. */
  interval: durationConfig("CARD_RECONCILE_INTERVAL", "1 hour"),
  /** A clearing or refund not moved on chain (nor owed) for longer than this is a difference. */
  pendingAfter: durationConfig("CARD_RECONCILE_PENDING_AFTER", "1 hour")
})

/** Receipts read at once: a node's usual batch, and few enough not to crowd the service's own reads. */
const RECEIPT_READS = 16

const FIRST_RUN_AFTER = Duration.minutes(1)
const DIFFERENCES_LOGGED = 20

export class CardReconciler extends Effect.Service<CardReconciler>()("app/CardReconciler", {
  effect: Effect.gen(function* () {
    const repo = yield* ReconciliationRepo
    const chain = yield* ChainClient
    const program = yield* CardProgram
    const { chainTimeout } = yield* AppConfig
    const settings = yield* reconcileSettings
    const bounded = withinChainTimeout(chainTimeout)

    const receiptOf = (hash: string) =>
      bounded(chain.receipt(hash as Hash, 0)).pipe(
        Effect.map((found) => [hash, found._tag === "Some" ? (found.value as MinedReceipt) : undefined] as const)
      )

    /** Reconciles once: the summary, with every difference found. */
    const run = Effect.gen(function* () {
      const db = yield* repo.facts()
      const [settlementBalance, receipts] = yield* Effect.all(
        [
          bounded(chain.balanceOf(chain.usd1.address, program.address)),
          Effect.forEach(receiptsToRead(db.transfers, db.owedEntries), receiptOf, { concurrency: RECEIPT_READS })
        ],
        { concurrency: 2 }
      )
      const now = new Date(yield* Clock.currentTimeMillis)
      return reconcile({
        ...db,
        now,
        pendingAfterMs: Duration.toMillis(settings.pendingAfter),
        settlementAccount: program.address,
        usd1: chain.usd1,
        settlementBalance,
        receipts: new Map(receipts)
      })
    }).pipe(Effect.withSpan("CardReconciler.run"))

    return { run, settings }
  }),
  dependencies: [ReconciliationRepo.Default]
}) {}

/**
 * Every CARD_RECONCILE_INTERVAL, the first a minute after start-up (the start and the engine's
 * catch-up come first; sooner when the interval is shorter): the summary as gauges, and the first
 * differences one WARN each (an outage can leave thousands pending: the gauges count them all, and
 * `npm run cards:reconcile` lists them).
 */
export const CardReconcileLive = backgroundLoop(
  "card-reconcile",
  Effect.map(CardReconciler, (reconciler) => ({
    tick: Effect.gen(function* () {
      const summary = yield* reconciler.run
      yield* setCardReconciliation(summary, DIFFERENCE_KINDS, yield* Clock.currentTimeMillis)
      for (const difference of summary.differences.slice(0, DIFFERENCES_LOGGED)) {
        yield* Effect.logWarning(`card reconciliation: ${difference.kind}`).pipe(Effect.annotateLogs({ ...difference }))
      }
      if (summary.differences.length > DIFFERENCES_LOGGED) {
        yield* Effect.logWarning(
          `card reconciliation: ${summary.differences.length - DIFFERENCES_LOGGED} more differences not logged`
        )
      }
    }),
    every: reconciler.settings.interval,
    firstAfter: Duration.min(Duration.decode(reconciler.settings.interval), FIRST_RUN_AFTER)
  }))
)
