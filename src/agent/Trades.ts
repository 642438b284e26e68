/**
 * The agent's trades: one state machine that carries a stored decision out step by step (sell,
 * buy, send) in the executor and, after a crash, in the reconciler; what a decision sells; and the
 * end of a decision (its status, events and cooldown in one transaction).
 *
 * - A refill of a card that owes the card program repays it first (step `repay`: USD1 straight to
 *   the settlement account), then sends the rest to the card; once the repayment is mined, the
 *   decision's end records it with the card program (`CardDebts.repaid`) in the same transaction,
 *   whatever status it ends in, once per transaction hash.
 * - A trade is stored as `executing` before anything is signed; every transaction is recorded after
 *   signing and before broadcast (one per step). The reconciler takes decisions left untouched longer
 *   than the lease: a mined sale without its send gets its send (once: the step is unique), a
 *   recorded transaction is confirmed or re-broadcast, and no more USD1 reaches the card than the
 *   sale produced. A decision whose first step was never recorded moved nothing and fails.
 * - A transaction still pending after `AGENT_TX_TIMEOUT` makes the decision `unknown` and blocks the
 *   card's trades for 30 minutes; an executed refill starts a 5-minute cooldown; a wallet that needs
 *   a sign-in is `blocked`.
 */
import { Clock, Duration, Effect, Option } from "effect"
import { getAddress, parseUnits } from "viem"
import { CardDebts } from "../cards/CardDebts.js"
import { Statement } from "../cards/Statement.js"
import type { Address } from "../chain/Address.js"
import { ChainClient, type Receipt, type SignedPurpose, type SignedTransaction } from "../chain/ChainClient.js"
import type { StockToken } from "../chain/Tokens.js"
import type { MarketData } from "../market/Api.js"
import { Market } from "../market/Market.js"
import { countAgentDecision } from "../observability/Metrics.js"
import { AgentEvents } from "./AgentEvents.js"
import {
  AgentRepo,
  type AgentTransaction,
  decisionItem,
  type ExecutingDecision,
  type FinishedStatus,
  type FinishGuard,
  type TransactionStep
} from "./AgentRepo.js"
import { type AgentCard, AgentWallet, type AgentWalletError, type WalletHoldings } from "./AgentWallet.js"
import { CASH_SYMBOL, type Decision } from "./Decide.js"
import type { LoopSettings } from "./LoopSettings.js"

/** The smaller of two amounts. */
const lesser = (a: bigint, b: bigint) => (a < b ? a : b)

/** After an executed refill, no new trade for the card before this. */
const REFILL_COOLDOWN_MS = 5 * 60_000
/** After a transaction in doubt, no new trade for the card before this. */
const UNKNOWN_BLOCK_MS = 30 * 60_000
/** How long the reconciler waits for a receipt before leaving the decision for its next pass. */
const RECONCILE_RECEIPT_WAIT_MS = 2_000

/** The trade a stored decision carries out, step by step: a refill repays what the card owes before it sends. */
const stepsOf = (decision: ExecutingDecision): ReadonlyArray<TransactionStep> => {
  const sale: ReadonlyArray<TransactionStep> = decision.symbol === CASH_SYMBOL ? [] : ["sell"]
  if (decision.action !== "refill") return [...sale, "buy"]
  const repay = decision.repayMicros === null ? [] : (["repay"] as const)
  // A refill may only repay (the card owed at least the smallest refill and needed nothing more).
  const usdMicros = BigInt(Math.round(decision.usd * 100)) * 10_000n
  const send = decision.repayMicros !== null && decision.repayMicros >= usdMicros ? [] : (["send"] as const)
  return [...sale, ...repay, ...send]
}

/** What the executor sells for a decision: an amount of the token and the least USD1 it accepts. */
export interface Sale {
  readonly amount: bigint
  readonly minUsd1Out: bigint
}

/** The wallet port's view of a card: its id, its address and its wallet's address once kept. */
export const agentCard = (card: {
  readonly cardId: string
  readonly address: Address
  readonly wallet?: Address | null
}): AgentCard => ({
  id: card.cardId,
  address: card.address,
  ...(card.wallet == null ? {} : { wallet: card.wallet })
})

/** What a wallet's failure makes of a decision: a sign-in problem blocks it, anything else fails it. */
export const walletOutcome = (error: AgentWalletError) =>
  error.code === "AGENT_WALLET_ERROR" ? ("failed" as const) : ("blocked" as const)

/** The services the loop and its trades work with. */
export const agentServices = Effect.all({
  repo: AgentRepo,
  market: Market,
  statement: Statement,
  events: AgentEvents,
  wallet: AgentWallet,
  chain: ChainClient,
  debts: CardDebts
})

/** The trades of one replica, with the settings of its loop. */
export const makeTrades = (settings: LoopSettings) =>
  Effect.gen(function* () {
    const { chain, debts, events, market, repo, statement, wallet } = yield* agentServices
    const leaseMs = Duration.toMillis(settings.lease)
    const txTimeoutMs = Duration.toMillis(settings.txTimeout)
    const { usd1 } = chain

    const tokenBySymbol = (symbol: string): StockToken =>
      Option.getOrThrowWith(Option.fromNullable(market.tokens.find((t) => t.symbol === symbol)), () =>
        Error(`no registry token ${symbol}`)
      )
    const usd1Atomic = (usd: number) => parseUnits(usd.toFixed(2), usd1.decimals)
    /** USD1 atomic units per millionth of a dollar. */
    const atomicPerMicro = 10n ** BigInt(Math.max(0, usd1.decimals - 6))
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

    /** The decision's mined repayment, recorded with the card program (once per transaction: idempotent). */
    const recordRepayment = (id: string, at: Date) =>
      repo.repayment(id).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () => Effect.void,
            onSome: ({ amount, cardId, hash }) =>
              debts.repaid({ cardId, amountMicros: amount / atomicPerMicro, tx: hash, at })
          })
        )
      )

    /**
     * Moves an executing decision to its final status, with its `decision` event (and an executed
     * refill's `refill` event, the statement item), in one transaction; false when it was final already.
     * A repayment it mined is recorded in the same transaction, whatever the status: the card program
     * was paid even when a later step failed.
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
            ? recordRepayment(id, at).pipe(
                Effect.zipRight(publishDecisions([id])),
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

    /**
     * Signs, records and broadcasts one step; the amounts follow from the steps before it. None when
     * the step has nothing to move (a repayment took all the sale brought in).
     */
    const perform = (
      decision: ExecutingDecision,
      step: TransactionStep,
      before: ReadonlyMap<TransactionStep, Receipt>,
      recorded: ReadonlyArray<AgentTransaction>,
      sale: Option.Option<Sale>
    ) =>
      Effect.gen(function* () {
        const card = agentCard(decision)
        const walletAddress = yield* wallet.address(card)
        const decided = usd1Atomic(decision.usd)
        const sold = before.get("sell")
        // The USD1 a step may spend: the decided amount, capped by what the sale brought in, less
        // what the repayment took of it.
        const received = sold === undefined ? decided : receivedUsd1(sold, walletAddress)
        const repaid = recorded.find((tx) => tx.step === "repay")?.amount ?? 0n
        const budget = lesser(received, decided) - repaid
        if (budget <= 0n) return Option.none<ReadonlyArray<AgentTransaction>>()
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
          case "repay": {
            // Exactly what the card owed when decided (never more than the sale brought in).
            const amount = lesser((decision.repayMicros ?? 0n) * atomicPerMicro, budget)
            yield* wallet.repayUsd1(card, debts.settlementAccount, amount, record(amount))
            break
          }
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
        return Option.some(yield* repo.transactions(decision.id))
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
          const performed = recorded.some((tx) => tx.step === step)
            ? Option.some(recorded)
            : yield* perform(decision, step, done, recorded, sale)
          if (Option.isNone(performed)) continue
          const txs = performed.value
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

    return {
      saleOf,
      /** Carries out a decision just stored as `executing`, selling `sale` for it. */
      execute: (id: string, sale: Option.Option<Sale>) => continueDecision(id, { executor: true, sale }, txTimeoutMs),
      reconcile,
      publishDecisions,
      recordRepayment
    }
  })
