/**
 * The agent loop: every `AGENT_INTERVAL`, decide for every card with a strategy, and in live mode
 * trade — from any number of replicas, never moving money twice.
 *
 * - Work is shared through PostgreSQL: a tick claims batches of due cards (`FOR UPDATE SKIP LOCKED`
 *   and a lease), decides them, stores the decisions in one statement and moves each card's due
 *   time forward. (card, interval) is unique, so a card is decided at most once per interval
 *   whichever replica takes it; a replica that dies loses its claims when the lease ends.
 * - Reads are per batch: card and wallet balances in one multicall each, prices from the market
 *   cache, the batch's 28-day spending in one query.
 * - Dry mode stores refills and rebalances as `dry-run`, and an idle decision (`none`, `hold`) as
 *   `logged` only when it differs (action, symbol, rule) from the card's previous one.
 * - Live mode stores a trade as `executing` before anything is signed; every transaction is
 *   recorded after signing and before broadcast (one per step: sell, buy, send). The same state
 *   machine continues a decision in the executor and, after a crash, in the reconciler, which
 *   takes decisions left untouched longer than the lease: a mined sale without its send gets its
 *   send (once: the step is unique), a recorded transaction is confirmed or re-broadcast, and no
 *   more USD1 reaches the card than the sale produced. A transaction still pending after
 *   `AGENT_TX_TIMEOUT` makes the decision `unknown` and blocks the card's trades for 30 minutes;
 *   an executed refill starts a 5-minute cooldown; a wallet that needs a sign-in is `blocked`.
 * - Finality: a tracker beside the loop follows every mined step until CHAIN_CONFIRMATIONS deep and
 *   sends one the chain lost (a reorg) again byte-identical; one that cannot be mined again undoes
 *   the decision when it was the step that delivered the money (docs/agent.md).
 */
import { randomUUID } from "node:crypto"
import { Clock, Config, ConfigError, Duration, Effect, Either, Layer, Metric, Option } from "effect"
import { formatUnits, getAddress, type Hash, type Hex, parseUnits } from "viem"
import { Statement } from "../cards/Statement.js"
import type { Address } from "../chain/Address.js"
import {
  ChainClient,
  chainConfirmations,
  isFinal,
  type Receipt,
  type SignedPurpose,
  type SignedTransaction,
  withinChainTimeout
} from "../chain/ChainClient.js"
import type { StockToken } from "../chain/Tokens.js"
import { Events } from "../events/Events.js"
import type { MarketData } from "../market/Api.js"
import { Market } from "../market/Market.js"
import {
  agentTickDuration,
  agentTickOverruns,
  countAgentDecision,
  countLostAgentTransaction
} from "../observability/Metrics.js"
import { reportUnavailable } from "../observability/Outages.js"
import { backgroundLoop } from "../runtime/BackgroundLoop.js"
import { AppConfig, durationConfig, positiveInteger } from "../runtime/Config.js"
import {
  AgentRepo,
  type AgentTransaction,
  type ClaimedCard,
  decisionItem,
  type ExecutingDecision,
  type FinishedStatus,
  type FinishGuard,
  type NewDecision,
  type TrackedTransaction,
  type TransactionStep
} from "./AgentRepo.js"
import { type AgentCard, AgentWallet, type AgentWalletError, type WalletHoldings } from "./AgentWallet.js"
import { CASH_SYMBOL, type Decision, decide } from "./Decide.js"
import { LOOKBACK_DAYS } from "./Forecast.js"
import { nextDueAfter } from "./Schedule.js"

const DAY_MS = 86_400_000
/** After an executed refill, no new trade for the card before this. */
const REFILL_COOLDOWN_MS = 5 * 60_000
/** After a transaction in doubt, no new trade for the card before this. */
const UNKNOWN_BLOCK_MS = 30 * 60_000
/** How long the reconciler waits for a receipt before leaving the decision for its next pass. */
const RECONCILE_RECEIPT_WAIT_MS = 2_000
/** Transactions the tracker checks per tick, least recently checked first. */
const TRACKED_PER_TICK = 50

const loopSettings = Config.all({
  interval: durationConfig("AGENT_INTERVAL", "1 minute"),
  /** The cards' due times are spread over this much of each interval (default: all of it). */
  jitter: durationConfig("AGENT_JITTER", Duration.infinity),
  /** How often the loop looks for due cards (default: a tenth of the interval, at most 5 seconds). */
  poll: durationConfig("AGENT_POLL", Duration.infinity),
  /** Live trades of one replica in flight at once. */
  concurrency: positiveInteger("AGENT_CONCURRENCY", 8),
  /** Cards claimed at a time. */
  batch: positiveInteger("AGENT_BATCH", 1000),
  /** Pages of cards one replica works on at once. */
  pagesInFlight: positiveInteger("AGENT_PAGES_IN_FLIGHT", 2),
  /** How long a replica holds its claim on a batch, and after which an unfinished trade is the reconciler's. */
  lease: durationConfig("AGENT_LEASE", "2 minutes"),
  /** How long a trade's transaction may stay unmined before the decision is `unknown`. */
  txTimeout: durationConfig("AGENT_TX_TIMEOUT", "60 seconds"),
  /** The worst price a sale or purchase accepts, below the feed price. */
  slippage: Config.number("AGENT_SLIPPAGE").pipe(
    Config.mapOrFail((n) =>
      n >= 0 && n < 0.5
        ? Either.right(n)
        : Either.left(ConfigError.InvalidData(["AGENT_SLIPPAGE"], "Expected AGENT_SLIPPAGE to be in [0, 0.5)"))
    ),
    Config.withDefault(0.01)
  )
}).pipe(
  Config.map((settings) => ({
    ...settings,
    jitter: Duration.min(settings.jitter, settings.interval),
    poll: Duration.isFinite(settings.poll)
      ? settings.poll
      : Duration.min(Duration.millis(Duration.toMillis(settings.interval) / 10), Duration.seconds(5))
  }))
)

/** The trade a stored decision carries out, step by step. */
const stepsOf = (decision: ExecutingDecision): ReadonlyArray<TransactionStep> =>
  decision.action === "refill"
    ? decision.symbol === CASH_SYMBOL
      ? ["send"]
      : ["sell", "send"]
    : decision.symbol === CASH_SYMBOL
      ? ["buy"]
      : ["sell", "buy"]

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
  reason: decision.reason,
  status,
  error,
  replica
})

/** What the executor sells for a decision: an amount of the token and the least USD1 it accepts. */
interface Sale {
  readonly amount: bigint
  readonly minUsd1Out: bigint
}

export interface TickSummary {
  readonly claimed: number
  readonly stored: number
  readonly executed: number
}

export class AgentLoop extends Effect.Service<AgentLoop>()("app/AgentLoop", {
  effect: Effect.gen(function* () {
    const repo = yield* AgentRepo
    const market = yield* Market
    const statement = yield* Statement
    const events = yield* Events
    const wallet = yield* AgentWallet
    const chain = yield* ChainClient
    const { agentMode, chainTimeout } = yield* AppConfig
    const settings = yield* loopSettings
    const confirmations = yield* chainConfirmations(chain)
    /** This replica, as the owner of its leases. */
    const owner = randomUUID()
    const intervalMs = Duration.toMillis(settings.interval)
    const jitterMs = Duration.toMillis(settings.jitter)
    const leaseMs = Duration.toMillis(settings.lease)
    const txTimeoutMs = Duration.toMillis(settings.txTimeout)
    const { usd1 } = chain

    const agentCard = (card: {
      readonly cardId: string
      readonly address: Address
      readonly wallet?: Address | null
    }): AgentCard => ({
      id: card.cardId,
      address: card.address,
      ...(card.wallet == null ? {} : { wallet: card.wallet })
    })
    const tokenBySymbol = (symbol: string): StockToken =>
      Option.getOrThrowWith(Option.fromNullable(market.tokens.find((t) => t.symbol === symbol)), () =>
        Error(`no registry token ${symbol}`)
      )
    const usd1Atomic = (usd: number) => parseUnits(usd.toFixed(2), usd1.decimals)
    /** USD1 atomic units per whole token at `price`. */
    const priceAtomic = (price: number) => parseUnits(price.toFixed(8), usd1.decimals)
    const withSlippage = (amount: bigint) =>
      (amount * BigInt(Math.round((1 - settings.slippage) * 1_000_000))) / 1_000_000n
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    /** Each decision's `decision` event (as the log shows it), for its card's holder. */
    const publishDecisions = (ids: ReadonlyArray<string>) =>
      ids.length === 0
        ? Effect.void
        : repo.decisionsById(ids).pipe(
            Effect.flatMap((rows) =>
              events.publishAll(
                rows.map(({ address, ...row }) => ({
                  address,
                  event: { type: "decision", data: decisionItem(row) } as const
                }))
              )
            )
          )

    /**
     * Moves an executing decision to its final status, with its `decision` event (and an executed
     * refill's `refill` event, the statement item), in one transaction; false when it was final already.
     */
    const finishDecision = (
      id: string,
      status: FinishedStatus,
      error: string | null,
      at: Date,
      guard: FinishGuard = "any"
    ) =>
      repo.finishDecision(id, status, error, at, guard).pipe(
        Effect.tap((finished) =>
          finished
            ? publishDecisions([id]).pipe(
                Effect.zipRight(status === "executed" ? statement.refill(id) : Effect.succeed(Option.none())),
                Effect.flatMap(
                  Option.match({
                    onNone: () => Effect.void,
                    onSome: ({ item, owner }) => events.publish(owner, { type: "refill", data: item })
                  })
                )
              )
            : Effect.void
        ),
        repo.withTransaction
      )

    // ---------------------------------------------------------------------------------------------
    // Execution: one state machine for the executor and the reconciler

    /** What a wallet's failure makes of a decision: a sign-in problem blocks it, anything else fails it. */
    const walletOutcome = (error: AgentWalletError) =>
      error.code === "AGENT_WALLET_ERROR" ? ("failed" as const) : ("blocked" as const)

    /** The USD1 the wallet received in a mined sale. */
    const receivedUsd1 = (receipt: Receipt, walletAddress: Address) =>
      receipt.transfers
        .filter((t) => t.token === usd1.address && getAddress(t.to) === getAddress(walletAddress))
        .reduce((sum, t) => sum + t.value, 0n)

    type StepResult = { readonly kind: "done"; readonly receipt: Receipt } | { readonly kind: "stop" }

    /** Waits for a recorded transaction's receipt; re-broadcasts it when the node does not know it. */
    const settle = (decision: ExecutingDecision, tx: AgentTransaction, waitMs: number) =>
      Effect.gen(function* () {
        const mined = yield* chain
          .receipt(tx.hash as `0x${string}`, 0)
          .pipe(
            Effect.flatMap((first) =>
              Option.isSome(first)
                ? Effect.succeed(first)
                : chain
                    .rebroadcast(tx.raw as `0x${string}`)
                    .pipe(Effect.zipRight(chain.receipt(tx.hash as `0x${string}`, waitMs)))
            )
          )
        const at = yield* now
        if (Option.isNone(mined)) {
          if (at.getTime() - tx.createdAt.getTime() < txTimeoutMs) return { kind: "stop" } as StepResult
          yield* finishDecision(decision.id, "unknown", `the ${tx.step} transaction ${tx.hash} is not mined`, at)
          yield* repo.setTradeAfter(decision.cardId, new Date(at.getTime() + UNKNOWN_BLOCK_MS))
          return { kind: "stop" } as StepResult
        }
        if (mined.value.status === "reverted") {
          yield* repo.finishTransaction(decision.id, tx.step, { status: "failed" }, at)
          yield* finishDecision(decision.id, "failed", `the ${tx.step} transaction ${tx.hash} reverted`, at)
          return { kind: "stop" } as StepResult
        }
        const { blockHash, blockNumber } = mined.value
        yield* repo.finishTransaction(decision.id, tx.step, { status: "succeeded", blockNumber, blockHash }, at)
        yield* repo.touch(decision.id, at)
        return { kind: "done", receipt: mined.value } as StepResult
      })

    /** Signs, records and broadcasts one step; the amounts follow from the steps before it. */
    const perform = (
      decision: ExecutingDecision,
      step: TransactionStep,
      before: ReadonlyMap<TransactionStep, Receipt>,
      sale: Option.Option<Sale>
    ) =>
      Effect.gen(function* () {
        const card = agentCard(decision)
        const walletAddress = yield* wallet.address(card)
        const decided = usd1Atomic(decision.usd)
        const sold = before.get("sell")
        // The USD1 a step may spend: the decided amount, capped by what the sale brought in.
        const received = sold === undefined ? decided : receivedUsd1(sold, walletAddress)
        // biome-ignore lint/complexity/useMathMinMax: bigint amounts; Math.min takes numbers only
        const budget = received < decided ? received : decided
        const record = (amount: bigint) => (signed: SignedTransaction, purpose: SignedPurpose) =>
          Effect.flatMap(now, (at) =>
            repo.recordTransaction({
              decisionId: decision.id,
              step: purpose === "approval" ? "approve" : step,
              hash: signed.hash,
              raw: signed.raw,
              sender: walletAddress,
              nonce: signed.nonce,
              amount,
              now: at
            })
          )
        switch (step) {
          case "sell": {
            const { amount, minUsd1Out } = Option.getOrThrow(sale)
            yield* wallet.sell(card, tokenBySymbol(decision.symbol!), amount, minUsd1Out, record(amount))
            break
          }
          case "send":
            yield* wallet.sendUsd1(card, budget, record(budget))
            break
          case "buy": {
            const token = tokenBySymbol(decision.buySymbol!)
            const price = (yield* market.marketData(token.address)).tokenPrice
            const tokensOut = (budget * 10n ** BigInt(token.decimals)) / priceAtomic(price)
            yield* wallet.buy(card, token, budget, withSlippage(tokensOut), record(budget))
            break
          }
        }
        return yield* repo.transactions(decision.id)
      })

    /**
     * Carries an executing decision as far as the chain allows. The executor (with `sale`, what to
     * sell, for a decision that sells) starts it; the reconciler only continues one whose first
     * transaction was recorded — without that nothing was sent, so the decision fails and a later
     * interval decides afresh at its own prices.
     */
    const continueDecision = (
      id: string,
      role: { readonly executor: true; readonly sale: Option.Option<Sale> } | { readonly executor: false },
      waitMs: number
    ) =>
      Effect.gen(function* () {
        const found = yield* repo.findExecuting(id)
        if (Option.isNone(found)) return
        const decision = found.value
        const done = new Map<TransactionStep, Receipt>()
        for (const [index, step] of stepsOf(decision).entries()) {
          const recorded = yield* repo.transactions(decision.id)
          if (!recorded.some((tx) => tx.step === step) && index === 0 && !role.executor) {
            const at = yield* now
            // Unless the executor recorded its first transaction meanwhile: then it is alive and goes on.
            yield* finishDecision(decision.id, "failed", "interrupted before its first step was signed", at, "unsigned")
            return
          }
          const sale = role.executor ? role.sale : Option.none<Sale>()
          const txs = recorded.some((tx) => tx.step === step) ? recorded : yield* perform(decision, step, done, sale)
          // The exchange's approval went out (and was mined) before the step that needed it.
          const approval = txs.find((tx) => tx.step === "approve" && tx.status === "broadcast")
          if (approval !== undefined && (yield* settle(decision, approval, waitMs)).kind === "stop") return
          const result = yield* settle(decision, txs.find((tx) => tx.step === step)!, waitMs)
          if (result.kind === "stop") return
          done.set(step, result.receipt)
        }
        const at = yield* now
        // The cooldown is written in the status's transaction: a tick that sees this refill executed
        // also sees its cooldown, whatever balances it read before the refill was mined.
        const executed = yield* finishDecision(decision.id, "executed", null, at).pipe(
          Effect.tap((finished) =>
            repo
              .setTradeAfter(decision.cardId, new Date(at.getTime() + REFILL_COOLDOWN_MS))
              .pipe(Effect.when(() => finished && decision.action === "refill"))
          ),
          repo.withTransaction
        )
        if (executed) {
          yield* countAgentDecision(decision.action, "executed")
          yield* Effect.logInfo(`agent ${decision.action} executed`).pipe(
            Effect.annotateLogs({ "card.id": decision.cardId, "decision.id": decision.id, usd: decision.usd })
          )
        }
      }).pipe(
        Effect.catchTags({
          DecisionTaken: () => Effect.void,
          AgentWalletError: (error) =>
            Effect.flatMap(now, (at) => finishDecision(id, walletOutcome(error), error.message, at)).pipe(
              Effect.zipRight(
                Effect.logWarning(`agent trade ${walletOutcome(error)}: ${error.message}`).pipe(
                  Effect.annotateLogs("decision.id", id)
                )
              )
            ),
          // The chain did not answer: the decision stays executing and the reconciler continues it.
          ChainError: (error) =>
            Effect.logWarning(`agent trade waits for the chain: ${error.message}`).pipe(
              Effect.annotateLogs("decision.id", id)
            ),
          PriceUnavailable: (error) =>
            Effect.logWarning(`agent purchase waits for a price: ${error.error}`).pipe(
              Effect.annotateLogs("decision.id", id)
            )
        }),
        Effect.withSpan("AgentLoop.execute", { attributes: { "decision.id": id } })
      )

    /** What the executor sells: enough of the token for the decided USD, at most what the wallet holds. */
    const saleOf = (
      decision: Decision,
      holdings: WalletHoldings,
      market: MarketData | undefined
    ): Option.Option<Sale> => {
      if (decision.action !== "refill" && decision.action !== "rebalance") return Option.none()
      if (decision.symbol === CASH_SYMBOL || market === undefined) return Option.none()
      const token = tokenBySymbol(decision.symbol)
      const usd = usd1Atomic(decision.usd)
      const unit = 10n ** BigInt(token.decimals)
      const price = priceAtomic(market.tokenPrice)
      const needed = (usd * unit + price - 1n) / price
      const held = holdings.tokens.get(token.address) ?? 0n
      const amount = needed < held ? needed : held
      return Option.some({ amount, minUsd1Out: withSlippage((amount * price) / unit) })
    }

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
        const [cardBalances, holdings, payments, latest] = yield* Effect.all(
          [
            chain.balances(addresses, [usd1.address]),
            holdingsOf(cards),
            statement.payments(addresses, at - (LOOKBACK_DAYS + 1) * DAY_MS),
            repo.latestDecisions(cards.map((card) => card.cardId))
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
            walletUsd1: Number(formatUnits(held.right.usd1, usd1.decimals)),
            tokens,
            spending: { cardCreatedAt: card.cardCreatedAt.getTime(), payments: payments.get(card.address) ?? [] },
            closures: market.settings.closures
          })
          const trade = decision.action === "refill" || decision.action === "rebalance"
          const sale =
            trade && decision.symbol !== CASH_SYMBOL
              ? saleOf(decision, held.right, marketBySymbol.get(decision.symbol))
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
     * Decides one claimed batch at `at`, stores it, moves the cards on from `now` and, live,
     * executes the trades.
     */
    const runBatch = (
      cards: ReadonlyArray<ClaimedCard>,
      at: number,
      now: number,
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
        yield* repo.advance(
          owner,
          yield* Effect.forEach(cards, (card) =>
            Effect.map(
              card.wallet === null
                ? wallet.address(agentCard(card)).pipe(Effect.option)
                : Effect.succeed(Option.none()),
              (derived) => ({
                cardId: card.cardId,
                // The next instant of the card's own grid after now, however far behind the loop fell.
                dueAt: new Date(nextDueAfter(card.cardId, Math.max(now, card.dueAt.getTime()), intervalMs, jitterMs)),
                // The wallet's address, derived once and kept: later reads need no key derivation.
                wallet: Option.getOrNull(derived)
              })
            )
          )
        )
        const trades = outcomes.flatMap((outcome) => {
          const id = outcome.row?.status === "executing" ? ids.get(outcome.card.cardId) : undefined
          return id === undefined ? [] : [{ id, sale: outcome.sale ?? Option.none() }]
        })
        yield* Effect.forEach(trades, ({ id, sale }) => continueDecision(id, { executor: true, sale }, txTimeoutMs), {
          concurrency: settings.concurrency,
          discard: true
        })
        return { stored: ids.size, executed: trades.length, tally }
      })

    /**
     * Claims and decides pages of the cards due now until none is left, with the market read once.
     * The decisions are taken at `at` (default: when the tick starts): a tool can ask what the loop
     * does at another instant, with today's cards. A tick longer than the interval is reported; it
     * never overlaps itself on a card (the claim's lease) and no card is due twice in one interval.
     */
    const tick = (at?: number) =>
      Effect.gen(function* () {
        const started = yield* Clock.currentTimeMillis
        const decidedAt = at ?? started
        let summary: TickSummary = { claimed: 0, stored: 0, executed: 0 }
        const tally = new Map<string, number>()
        // Read once per tick, and only once a card is due.
        const markets = yield* Effect.cached(marketsAt(decidedAt))
        const pages = Effect.gen(function* () {
          while (true) {
            const now = yield* Clock.currentTimeMillis
            // The cards due when the tick started: those falling due meanwhile are the next tick's, so
            // that a tick ends and a page is never a trickle of one or two cards.
            const cards = yield* repo.claimDue({
              owner,
              now: new Date(started),
              leaseUntil: new Date(now + leaseMs),
              limit: settings.batch
            })
            if (cards.length === 0) return
            const batch = yield* runBatch(cards, decidedAt, now, yield* markets)
            for (const [key, n] of batch.tally) tally.set(key, (tally.get(key) ?? 0) + n)
            summary = {
              claimed: summary.claimed + cards.length,
              stored: summary.stored + batch.stored,
              executed: summary.executed + batch.executed
            }
          }
        })
        // Pages in flight side by side: one page's cards are decided while another waits for PostgreSQL.
        yield* Effect.all(
          Array.from({ length: settings.pagesInFlight }, () => pages),
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

    /** Continues the trades whose executor went quiet for longer than the lease (it crashed or hung). */
    const reconcile = Effect.gen(function* () {
      const before = new Date((yield* Clock.currentTimeMillis) - leaseMs)
      const stale = yield* repo.lockStale({ before, limit: 50 }).pipe(
        Effect.tap((rows) => Effect.forEach(rows, (row) => Effect.flatMap(now, (at) => repo.touch(row.id, at)))),
        repo.withTransaction
      )
      yield* Effect.forEach(stale, (row) => continueDecision(row.id, { executor: false }, RECONCILE_RECEIPT_WAIT_MS), {
        concurrency: settings.concurrency,
        discard: true
      })
      if (stale.length > 0) yield* Effect.logInfo(`agent reconciler continued ${stale.length} unfinished trade(s)`)
    }).pipe(Effect.withSpan("AgentLoop.reconcile"))

    // ---------------------------------------------------------------------------------------------
    // Finality: every succeeded transaction followed until CHAIN_CONFIRMATIONS deep

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
        if (!delivers(tx)) {
          return yield* Effect.logWarning(`agent ${tx.action}: ${lost}; the wallet's own USD1 paid the steps after it`)
        }
        const failed = yield* repo.failLostDecision(tx.decisionId, lost, at).pipe(
          Effect.tap((failed) => (failed ? publishDecisions([tx.decisionId]) : Effect.void)),
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
     * Checks the succeeded transactions not final yet, least recently checked first, at most
     * TRACKED_PER_TICK, each wallet's in nonce order (a sale sent again before the send that spends
     * it). No row lock is held: every write is conditional. A chain that does not answer ends the tick.
     */
    const followChain = Effect.gen(function* () {
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

    return { settings, tick, reconcile, followChain }
  }),
  dependencies: [AgentRepo.Default]
}) {}

/**
 * The loop, when `AGENT_MODE` is `dry` or `live`: unfinished trades first, then the due cards; and
 * beside it the tracker of the agent's transactions, at the same pace.
 */
export const AgentLoopLive = Layer.merge(
  backgroundLoop(
    "agent",
    Effect.map(AgentLoop, (loop) => ({
      tick: Effect.zipRight(loop.reconcile, loop.tick()),
      every: loop.settings.poll
    }))
  ),
  backgroundLoop(
    "agent-tracker",
    Effect.map(AgentLoop, (loop) => ({ tick: loop.followChain, every: loop.settings.poll }))
  )
)
