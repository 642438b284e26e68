/**
 * The agent loop: every `AGENT_INTERVAL`, decide for every card with a strategy, and in live mode
 * trade — from any number of replicas, never moving money twice.
 *
 * - Work is shared through PostgreSQL: a tick claims slices of cards (a range of the cards' hashes,
 *   due in one stretch of the interval: `Schedule.ts`) once their window in the interval closed,
 *   one row per slice under a lease (`FOR UPDATE SKIP LOCKED`), and before them pages of cards
 *   whose strategy was just set or changed; it decides them and stores the decisions in one
 *   statement. A steady tick writes no card's row. (card, interval) is unique, so a card is
 *   decided at most once per interval whichever replica takes it; the slices and pages of a
 *   replica that dies are taken over when their lease ends.
 * - Reads are per page: card and wallet balances in multicalls, prices once per tick from the
 *   market cache, the page's 28-day spending in one query, the cards' commitments (holds, pending
 *   clearings, owed amounts, allowances) in another. Memory is the pages in flight.
 * - Dry mode stores refills and rebalances as `dry-run`, and an idle decision (`none`, `hold`) as
 *   `logged` only when it differs (action, symbol, rule) from the card's previous one.
 * - Live mode stores a trade as `executing` and hands it to the trades' state machine
 *   (`Trades.ts`), which also continues what a crashed executor left; beside the loop the tracker
 *   (`Tracker.ts`) follows every mined step to finality.
 */
import { randomUUID } from "node:crypto"
import type { SqlError } from "@effect/sql/SqlError"
import { Clock, Duration, Effect, Either, Layer, Metric, Option } from "effect"
import { formatUnits } from "viem"
import type { CardCommitments } from "../cards/CardDebts.js"
import { backgroundLoop } from "../lifecycle/BackgroundLoop.js"
import type { MarketData } from "../market/Api.js"
import { agentTickDuration, agentTickOverruns, countAgentDecision } from "../observability/Metrics.js"
import { AppConfig } from "../runtime/Config.js"
import { AgentRepo, type ClaimedCard, decisionItem, type NewDecision } from "./AgentRepo.js"
import type { WalletHoldings } from "./AgentWallet.js"
import { CASH_SYMBOL, type Decision, decide } from "./Decide.js"
import { LOOKBACK_DAYS } from "./Forecast.js"
import { loopSettings } from "./LoopSettings.js"
import { makeTracker } from "./Tracker.js"
import { agentCard, agentServices, makeTrades, walletOutcome } from "./Trades.js"

const DAY_MS = 86_400_000

const usdOfMicros = (micros: bigint) => Number(micros) / 1_000_000

/**
 * A card's commitments as `decide` counts them: what it owes less the repayments still in doubt
 * (`repayingMicros`: one may yet be mined, and must never be paid twice), and its allowance only
 * when it has one.
 */
export const commitmentsOf = (committed: CardCommitments, repayingMicros: bigint) => {
  const owed = committed.owedMicros - repayingMicros
  return {
    heldUsd: usdOfMicros(committed.heldMicros),
    clearedPendingUsd: usdOfMicros(committed.clearedPendingMicros),
    owedUsd: owed > 0n ? usdOfMicros(owed) : 0,
    allowanceUsd: committed.allowanceMicros > 0n ? usdOfMicros(committed.allowanceMicros) : null
  }
}

/** The stored form of a decision taken at `at` for a card's interval. */
const stored = (
  replica: string,
  card: ClaimedCard,
  at: number,
  decision: Decision,
  status: NewDecision["status"],
  error: string | null = null
): NewDecision => ({
  cardId: card.cardId,
  dueAt: card.dueAt,
  at: new Date(at),
  action: decision.action,
  rule: decision.rule,
  symbol: decision.action === "refill" || decision.action === "rebalance" ? decision.symbol : null,
  buySymbol: decision.action === "rebalance" ? decision.buySymbol : null,
  usd: decision.action === "refill" || decision.action === "rebalance" ? decision.usd : null,
  needUsd: decision.needUsd,
  horizon: new Date(decision.horizon),
  spread: decision.action === "refill" || decision.action === "rebalance" ? decision.spread : null,
  repayMicros:
    decision.action === "refill" && decision.repayUsd > 0 ? BigInt(Math.round(decision.repayUsd * 1_000_000)) : null,
  reason: decision.reason,
  status,
  error,
  replica
})

/** Ends a claim once its decisions are stored, keeping the wallet addresses derived for its cards. */
type Finish = (
  wallets: ReadonlyArray<{ readonly cardId: string; readonly wallet: string }>
) => Effect.Effect<void, SqlError>

export interface TickSummary {
  readonly claimed: number
  readonly stored: number
  readonly executed: number
}

export class AgentLoop extends Effect.Service<AgentLoop>()("app/AgentLoop", {
  effect: Effect.gen(function* () {
    const { chain, debts, events, market, repo, statement, wallet } = yield* agentServices
    const { agentMode } = yield* AppConfig
    const settings = yield* loopSettings
    const trades = yield* makeTrades(settings)
    const followChain = yield* makeTracker(trades)
    /** This replica, as the owner of its leases. */
    const owner = randomUUID()
    const intervalMs = Duration.toMillis(settings.interval)
    const jitterMs = Duration.toMillis(settings.jitter)
    const leaseMs = Duration.toMillis(settings.lease)
    const { usd1 } = chain
    const atomicPerMicro = 10n ** BigInt(Math.max(0, usd1.decimals - 6))

    // ---------------------------------------------------------------------------------------------
    // A tick

    /** The holdings of each card's wallet: one bulk read, or card by card when the bulk read fails. */
    const holdingsOf = (cards: ReadonlyArray<ClaimedCard>) =>
      wallet.holdings(cards.map(agentCard)).pipe(
        Effect.map((all) => all.map((holdings) => Either.right<WalletHoldings>(holdings))),
        Effect.catchAll(() =>
          Effect.forEach(cards, (card) =>
            wallet.holdings([agentCard(card)]).pipe(
              Effect.map((one) => one[0]!),
              Effect.either
            )
          )
        )
      )

    /** Every registry token's market data at `at`, by symbol (a token without a price is left out). */
    const marketsAt = (at: number) =>
      Effect.forEach(
        market.tokens,
        (token) =>
          market.marketData(token.address, at).pipe(
            Effect.option,
            Effect.map((data) => [token.symbol, data] as const)
          ),
        { concurrency: "unbounded" }
      ).pipe(
        Effect.map(
          (markets) =>
            new Map(markets.flatMap(([symbol, data]) => (Option.isSome(data) ? [[symbol, data.value] as const] : [])))
        )
      )

    const decideBatch = (
      cards: ReadonlyArray<ClaimedCard>,
      at: number,
      marketBySymbol: ReadonlyMap<string, MarketData>
    ) =>
      Effect.gen(function* () {
        const addresses = cards.map((card) => card.address)
        const cardIds = cards.map((card) => card.cardId)
        const [cardBalances, holdings, [payments, latest, committed]] = yield* Effect.all(
          [
            chain.balances(addresses, [usd1.address]),
            holdingsOf(cards),
            // One after the other: a page holds at most one pooled connection at a time, so a
            // replica's loop needs at most AGENT_PAGES_IN_FLIGHT of them and the API keeps the rest.
            Effect.all([
              statement.payments(addresses, at - (LOOKBACK_DAYS + 1) * DAY_MS),
              repo.latestDecisions(cardIds),
              debts.commitments(cardIds, at)
            ])
          ],
          { concurrency: "unbounded" }
        )
        const previous = new Map(latest.map((row) => [row.cardId, row]))

        return cards.map((card, i) => {
          const held = holdings[i]!
          if (Either.isLeft(held)) {
            const error = held.left
            const hold: Decision = {
              action: "hold",
              rule: "NOTHING_TO_SELL",
              reason: `The agent wallet cannot be read: ${error.message}.`,
              usd: 0,
              needUsd: 0,
              horizon: at
            }
            return { card, decision: hold, row: stored(owner, card, at, hold, walletOutcome(error), error.message) }
          }
          const tokens = market.tokens
            .filter((token) => (held.right.tokens.get(token.address) ?? 0n) > 0n || token.symbol in card.targets)
            .map((token) => ({
              symbol: token.symbol,
              balance: Number(formatUnits(held.right.tokens.get(token.address) ?? 0n, token.decimals)),
              market: marketBySymbol.get(token.symbol) ?? null
            }))
          const decision = decide({
            at,
            strategy: { targets: card.targets, weeklySpendUsd: card.weeklySpendUsd, timeZone: card.timeZone },
            cardUsd1: Number(formatUnits(cardBalances[i]![0]!, usd1.decimals)),
            commitments: commitmentsOf(
              committed.get(card.cardId)!,
              (previous.get(card.cardId)?.repaying ?? 0n) / atomicPerMicro
            ),
            walletUsd1: Number(formatUnits(held.right.usd1, usd1.decimals)),
            tokens,
            spending: { cardCreatedAt: card.cardCreatedAt.getTime(), payments: payments.get(card.address) ?? [] },
            closures: market.settings.closures
          })
          const trade = decision.action === "refill" || decision.action === "rebalance"
          const sale =
            trade && decision.symbol !== CASH_SYMBOL
              ? trades.saleOf(decision, held.right, marketBySymbol.get(decision.symbol))
              : Option.none()
          if (!trade) {
            const last = previous.get(card.cardId)
            // An idle decision has no symbol: the same action and rule as the last one is nothing new.
            const same =
              last !== undefined &&
              last.action === decision.action &&
              last.rule === decision.rule &&
              last.symbol === null
            return { card, decision, row: same ? undefined : stored(owner, card, at, decision, "logged") }
          }
          if (agentMode !== "live") return { card, decision, row: stored(owner, card, at, decision, "dry-run") }
          if (previous.get(card.cardId)?.status === "executing") {
            // One trade in flight per card: the last one is still being executed (or reconciled).
            return {
              card,
              decision,
              row: stored(owner, card, at, decision, "blocked", "the previous trade is still being executed")
            }
          }
          // Read with the previous decision (one statement): the claim's copy may predate its refill.
          const tradeAfter = previous.get(card.cardId)?.tradeAfter ?? card.tradeAfter
          if (tradeAfter !== null && tradeAfter.getTime() > at) {
            const until = tradeAfter.toISOString()
            return {
              card,
              decision,
              row: stored(owner, card, at, decision, "blocked", `no trade for this card before ${until}`)
            }
          }
          return { card, decision, sale, row: stored(owner, card, at, decision, "executing") }
        })
      })

    /**
     * Decides one claimed batch (a page of cards marked due, or a slice) at `at`, stores it, ends
     * the claim and, live, executes the trades.
     */
    const runBatch = (
      { cards, finish }: { readonly cards: ReadonlyArray<ClaimedCard>; readonly finish: Finish },
      at: number,
      markets: ReadonlyMap<string, MarketData>
    ) =>
      Effect.gen(function* () {
        const outcomes = yield* decideBatch(cards, at, markets)
        const rows = outcomes.flatMap((outcome) => (outcome.row === undefined ? [] : [outcome.row]))
        // The stored decisions' `decision` events, in the transaction that stores them.
        const addresses = new Map(cards.map((card) => [card.cardId, card.address]))
        const stored =
          rows.length === 0
            ? new Map()
            : yield* repo.insertDecisions(rows, new Date(yield* Clock.currentTimeMillis)).pipe(
                Effect.tap((stored) =>
                  events.publishAll(
                    [...stored].map(([cardId, row]) => ({
                      address: addresses.get(cardId)!,
                      event: { type: "decision", data: decisionItem(row) } as const
                    }))
                  )
                ),
                repo.withTransaction
              )
        const ids = new Map([...stored].map(([cardId, row]) => [cardId, row.id]))
        // The counters, and one span per stored decision (an unchanged card only counts in the tick's tally).
        const tally = new Map<string, number>()
        yield* Effect.forEach(
          outcomes,
          ({ card, decision, row }) => {
            const id = ids.get(card.cardId)
            const status = row === undefined ? "unchanged" : id === undefined ? "taken" : row.status
            const key = `${decision.action}.${status}`
            tally.set(key, (tally.get(key) ?? 0) + 1)
            return id === undefined
              ? Effect.void
              : countAgentDecision(decision.action, status).pipe(
                  Effect.withSpan("AgentLoop.decision", {
                    attributes: {
                      "card.id": card.cardId,
                      "decision.action": decision.action,
                      "decision.rule": decision.rule,
                      "decision.status": status,
                      "decision.id": id
                    }
                  })
                )
          },
          { discard: true }
        )
        // The wallets' addresses derived for this page (a card's first look), kept: later reads need no key derivation.
        const derived = yield* Effect.forEach(
          cards.filter((card) => card.wallet === null),
          (card) =>
            wallet
              .address(agentCard(card))
              .pipe(Effect.option, Effect.map(Option.map((address) => ({ cardId: card.cardId, wallet: address }))))
        )
        yield* finish(derived.flatMap(Option.toArray))
        const trading = outcomes.flatMap((outcome) => {
          const id = outcome.row?.status === "executing" ? ids.get(outcome.card.cardId) : undefined
          return id === undefined ? [] : [{ id, sale: outcome.sale ?? Option.none() }]
        })
        yield* Effect.forEach(trading, ({ id, sale }) => trades.execute(id, sale), {
          concurrency: settings.concurrency,
          discard: true
        })
        return { stored: ids.size, executed: trading.length, tally }
      })

    /**
     * Claims and decides the cards due now until none is left, with the market read once: first
     * the pages of cards marked due at once (a strategy just set or changed), then the slices
     * whose window closed. `at` (default: when the tick starts) is the instant the decisions are
     * taken at and the slices' windows closed by (the bench and the tests run intervals to come,
     * or a tool an instant past, with today's cards; leases always follow the clock). A tick longer than the interval is
     * reported; it never overlaps itself on a card (a slice is claimed once per window).
     */
    const tick = (at?: number) =>
      Effect.gen(function* () {
        const started = yield* Clock.currentTimeMillis
        const decidedAt = at ?? started
        let summary: TickSummary = { claimed: 0, stored: 0, executed: 0 }
        const tally = new Map<string, number>()
        // Read once per tick, and only once a card is due.
        const markets = yield* Effect.cached(marketsAt(decidedAt))
        const decideClaimed = (claimed: { readonly cards: ReadonlyArray<ClaimedCard>; readonly finish: Finish }) =>
          Effect.gen(function* () {
            const batch = yield* runBatch(claimed, decidedAt, yield* markets)
            for (const [key, n] of batch.tally) tally.set(key, (tally.get(key) ?? 0) + n)
            summary = {
              claimed: summary.claimed + claimed.cards.length,
              stored: summary.stored + batch.stored,
              executed: summary.executed + batch.executed
            }
            return true
          })
        const decidePage = (claimed: { readonly cards: ReadonlyArray<ClaimedCard>; readonly page: string | null }) =>
          claimed.page === null
            ? Effect.succeed(false)
            : decideClaimed({
                cards: claimed.cards,
                finish: (wallets) => repo.finishPage(claimed.page!, owner, wallets)
              })
        const lease = Effect.map(Clock.currentTimeMillis, (now) => ({
          owner,
          now: new Date(now),
          leaseUntil: new Date(now + leaseMs)
        }))
        // First the pages of replicas whose lease ended (they died or hung), one at a time: rare.
        while (yield* Effect.flatMap(lease, repo.takeOverPage).pipe(Effect.flatMap(decidePage))) {}
        // Then the cards marked due when the tick started (or by `at`, if later): those marked
        // meanwhile are the next tick's.
        const claimPage = Effect.flatMap(lease, ({ now: _, ...lease }) =>
          repo.claimDue({ ...lease, now: new Date(Math.max(started, decidedAt)), limit: settings.batch })
        )
        const slices = yield* repo.prepareSlices({
          pageSize: settings.batch,
          dueBy: new Date(decidedAt),
          intervalMs
        })
        const claimSlice = Effect.flatMap(lease, (lease) =>
          repo.claimSlice({ ...lease, slices, dueBy: decidedAt, intervalMs, spreadMs: jitterMs })
        )
        const decideSlice = ({ cards, slice }: Effect.Effect.Success<typeof claimSlice>) =>
          slice === null
            ? Effect.succeed(false)
            : cards.length === 0
              ? Effect.succeed(true) // done as claimed
              : decideClaimed({ cards, finish: (wallets) => repo.finishSlice(slice, owner, wallets) })
        // Once a claim finds nothing, the other pages in flight claim no more either.
        const left = { pages: true, slices: true }
        const claims = Effect.gen(function* () {
          while (left.pages) if (!(yield* Effect.flatMap(claimPage, decidePage))) left.pages = false
          while (left.slices) if (!(yield* Effect.flatMap(claimSlice, decideSlice))) left.slices = false
        })
        // Pages in flight side by side: one page's cards are decided while another waits for PostgreSQL.
        yield* Effect.all(
          Array.from({ length: settings.pagesInFlight }, () => claims),
          {
            concurrency: "unbounded",
            discard: true
          }
        )
        const tookMs = (yield* Clock.currentTimeMillis) - started
        yield* Metric.update(agentTickDuration, tookMs / 1000)
        if (tookMs > intervalMs) {
          yield* Metric.increment(agentTickOverruns)
          yield* Effect.logWarning(
            `agent tick took ${Duration.format(Duration.millis(tookMs))}, longer than its interval of ` +
              `${Duration.format(settings.interval)}: add replicas or lengthen AGENT_INTERVAL`
          ).pipe(Effect.annotateLogs({ "agent.cards_claimed": summary.claimed }))
        }
        yield* Effect.annotateCurrentSpan({
          "agent.cards_claimed": summary.claimed,
          "agent.decisions_stored": summary.stored,
          "agent.trades": summary.executed,
          // e.g. agent.decisions.refill.dry-run = 12, agent.decisions.none.unchanged = 980
          ...Object.fromEntries([...tally].map(([key, n]) => [`agent.decisions.${key}`, n]))
        })
        return summary
      }).pipe(Effect.withSpan("AgentLoop.tick"))

    /** This replica stops: its claims' leases end, its trades are the reconciler's at once. */
    const release = Effect.flatMap(Clock.currentTimeMillis, (now) =>
      repo.releaseClaims(owner, new Date(now - leaseMs))
    ).pipe(Effect.withSpan("AgentLoop.release"))

    return { settings, tick, reconcile: trades.reconcile, followChain, release }
  }),
  dependencies: [AgentRepo.Default]
}) {}

/**
 * The loop, when `AGENT_MODE` is `dry` or `live`: unfinished trades first, then the due cards, its
 * claims given back when it stops; and beside it the tracker of the agent's transactions, at the
 * same pace.
 */
export const AgentLoopLive = Layer.merge(
  backgroundLoop(
    "agent",
    Effect.map(AgentLoop, (loop) => ({
      tick: Effect.zipRight(loop.reconcile, loop.tick()),
      every: loop.settings.poll,
      release: loop.release
    }))
  ),
  backgroundLoop(
    "agent-tracker",
    Effect.map(AgentLoop, (loop) => ({ tick: loop.followChain, every: loop.settings.poll }))
  )
)
