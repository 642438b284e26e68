/**
 * The agent's account-facing side: a card's strategy, its portfolio (the agent wallet's holdings
 * valued at market), the decision `decide` would take at any instant, the decision log and the
 * wallet's session. Which account a request describes: the signed-in caller's card, or without a
 * token the card an operator made public (`AGENT_PUBLIC_CARD`); without one, an anonymous read is
 * 401: a card holder's address, balances and holdings are never shown to whoever asks.
 *
 * Reads of one account (the card's USD1, the wallet's holdings, every token's market data) run in
 * parallel, each bounded (`AGENT_READ_TIMEOUT`, `PRICE_READ_TIMEOUT`), so an answer never waits on a
 * slow source longer than that.
 */

import { Clock, Config, Duration, Effect, Either, Option } from "effect"
import { formatUnits, getAddress, isAddress } from "viem"
import type { CardRef } from "../cards/Card.js"
import { CardDebts } from "../cards/CardDebts.js"
import { Cards } from "../cards/Cards.js"
import { Statement } from "../cards/Statement.js"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { BadRequest, Unauthorized } from "../http/ApiError.js"
import { DEFAULT_PAGE_SIZE } from "../http/QueryParams.js"
import type { MarketData, PriceUnavailable } from "../market/Api.js"
import { Market } from "../market/Market.js"
import { traced } from "../observability/Traced.js"
import { AppConfig, durationConfig } from "../runtime/Config.js"
import { AgentEvents } from "./AgentEvents.js"
import { commitmentsOf } from "./AgentLoop.js"
import { AgentRepo, decisionItem, type StrategyRow } from "./AgentRepo.js"
import { type AgentCard, AgentWallet, type AgentWalletError, type WalletHoldings } from "./AgentWallet.js"
import {
  AgentWalletFailed,
  CardRequired,
  ChainUnavailable,
  NoAgentAccount,
  NotLoggedIn,
  Portfolio,
  Preview,
  SessionExpired,
  Strategy,
  type StrategyBody,
  StrategyNotFound,
  UnknownToken
} from "./Api.js"
import { CASH_SYMBOL, decide, withoutStrategy } from "./Decide.js"
import { LOOKBACK_DAYS } from "./Forecast.js"
import { validateStrategy } from "./Strategy.js"

const agentSettings = Config.all({
  /** The card anonymous reads describe (a demo's): a card id, or its holder's address; none by default. */
  publicCard: Config.option(Config.string("AGENT_PUBLIC_CARD")),
  readTimeout: durationConfig("AGENT_READ_TIMEOUT", "3 seconds")
})

const DAY_MS = 86_400_000

/** The wallet's failure as the API answers it: sign-in problems keep their codes. */
export const walletFailure = (error: AgentWalletError) =>
  error.code === "SESSION_EXPIRED"
    ? new SessionExpired({ error: error.message })
    : error.code === "NOT_LOGGED_IN"
      ? new NotLoggedIn({ error: error.message })
      : new AgentWalletFailed({ error: error.message })

/** Atomic units as a number of whole units. */
const units = (atomic: bigint, decimals: number) => Number(formatUnits(atomic, decimals))

export interface AccountState {
  readonly card: CardRef
  readonly cardUsd1: number
  readonly holdings: WalletHoldings
  /** Every registry token's market data (status at the instant asked), or why it has none. */
  readonly markets: ReadonlyMap<string, Either.Either<MarketData, PriceUnavailable>>
}

export class Agent extends Effect.Service<Agent>()("app/Agent", {
  effect: Effect.gen(function* () {
    const repo = yield* AgentRepo
    const cards = yield* Cards
    const market = yield* Market
    const statement = yield* Statement
    const debts = yield* CardDebts
    const wallet = yield* AgentWallet
    const chain = yield* ChainClient
    const events = yield* AgentEvents
    const mode = (yield* AppConfig).agentMode === "live" ? "live" : "dry"
    const settings = yield* agentSettings

    const agentCard = (card: CardRef): AgentCard => ({ id: card.id, address: card.address })

    const cardOf = (address: Address) =>
      cards.find(address).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () =>
              Effect.fail(new CardRequired({ error: "this user has no card yet: pass the identity check" })),
            onSome: Effect.succeed
          })
        )
      )

    const publicCard = Option.match(settings.publicCard, {
      onNone: () =>
        Effect.fail(
          new Unauthorized({
            error:
              "no card is public here: send your bearer token to read your own account (an operator may make " +
              "one card public with AGENT_PUBLIC_CARD)"
          })
        ),
      onSome: (named) =>
        Effect.gen(function* () {
          const given = named.trim()
          const card = yield* cards.find(isAddress(given, { strict: false }) ? getAddress(given) : given)
          if (Option.isNone(card))
            return yield* new NoAgentAccount({ error: `AGENT_PUBLIC_CARD names no card (${given})` })
          return card.value
        })
    })

    /** The caller's card, or without a caller the public card. */
    const accountOf = (viewer: Option.Option<Address>) =>
      Option.match(viewer, { onNone: () => publicCard, onSome: cardOf })

    const strategyOf = (card: CardRef) =>
      repo.findStrategy(card.id).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () =>
              Effect.fail(new StrategyNotFound({ error: "this card has no strategy yet: PUT /strategy sets one" })),
            onSome: Effect.succeed
          })
        )
      )

    /** The card's payments the forecast reads at `at` (its lookback). */
    const spendingOf = (card: CardRef, at: number) =>
      statement.payments([card.address], at - (LOOKBACK_DAYS + 1) * DAY_MS).pipe(
        Effect.map((payments) => ({
          cardCreatedAt: card.createdAt.getTime(),
          payments: payments.get(card.address) ?? []
        }))
      )

    const strategyView = (row: StrategyRow) =>
      new Strategy({
        targets: row.targets,
        weeklySpendUsd: row.weeklySpendUsd,
        timeZone: row.timeZone,
        updatedAt: row.updatedAt.getTime()
      })

    const bounded = <A, E, R, E2>(effect: Effect.Effect<A, E, R>, onTimeout: () => E2) =>
      effect.pipe(Effect.timeoutFail({ duration: settings.readTimeout, onTimeout }))

    const waited = `did not answer within ${Duration.format(settings.readTimeout)}`

    /** A wallet call within the read bound, its failures as the API answers them. */
    const fromWallet = <A>(call: Effect.Effect<A, AgentWalletError>) =>
      bounded(call, () => new AgentWalletFailed({ error: `the agent wallet ${waited}` })).pipe(
        Effect.catchTag("AgentWalletError", (error) => Effect.fail(walletFailure(error)))
      )

    /** The card's USD1, the wallet's holdings and every token's market data, read in parallel. */
    const readAccount = (card: CardRef, at: number) =>
      Effect.all(
        {
          cardUsd1: bounded(chain.balanceOf(chain.usd1.address, card.address), () => "timeout" as const).pipe(
            Effect.mapError(
              (error) =>
                new ChainUnavailable({
                  error: `the card's USD1 balance could not be read: ${error === "timeout" ? `the chain ${waited}` : error.message}`
                })
            ),
            Effect.map((atomic) => units(atomic, chain.usd1.decimals))
          ),
          holdings: bounded(wallet.holdings([agentCard(card)]), () => "timeout" as const).pipe(
            Effect.mapError((error) =>
              error === "timeout"
                ? new AgentWalletFailed({ error: `the agent wallet ${waited}` })
                : walletFailure(error)
            ),
            Effect.map((all) => all[0]!)
          ),
          markets: Effect.forEach(
            market.tokens,
            (token) =>
              market.marketData(token.address, at).pipe(
                // Registry tokens are always found.
                Effect.catchTag("NotFound", Effect.die),
                Effect.either,
                Effect.map((data) => [token.symbol, data] as const)
              ),
            { concurrency: "unbounded" }
          ).pipe(Effect.map((entries) => new Map(entries)))
        },
        { concurrency: "unbounded" }
      ).pipe(Effect.map((state): AccountState => ({ card, ...state })))

    /** The tokens an account shows: those its wallet holds or its strategy targets, with their market data. */
    const shownTokens = (state: AccountState, targets: Readonly<Record<string, number>>) =>
      Effect.forEach(
        market.tokens.filter(
          (token) => (state.holdings.tokens.get(token.address) ?? 0n) > 0n || token.symbol in targets
        ),
        (token) => {
          const data = state.markets.get(token.symbol)!
          return Either.isLeft(data)
            ? Effect.fail(data.left)
            : Effect.succeed({
                token,
                balance: units(state.holdings.tokens.get(token.address) ?? 0n, token.decimals),
                market: data.right
              })
        }
      )

    const putStrategy = traced("Agent.putStrategy")(function* (address: Address, body: typeof StrategyBody.Type) {
      const card = yield* cardOf(address)
      yield* Effect.annotateCurrentSpan("card.id", card.id)
      const strategy = yield* validateStrategy(body, (key) => Option.getOrUndefined(market.resolve(key))?.symbol).pipe(
        Effect.mapError((error) =>
          error._tag === "UnknownToken"
            ? new UnknownToken({ error: error.message })
            : new BadRequest({ error: error.message })
        )
      )
      const now = new Date(yield* Clock.currentTimeMillis)
      // The user's `strategy` event (every stream of the user learns it), in the same transaction.
      const row = yield* repo.upsertStrategy({ cardId: card.id, ...strategy, now }).pipe(
        Effect.tap((row) => events.publish(address, { type: "strategy", data: strategyView(row) })),
        repo.withTransaction
      )
      // A new card's wallet gets its starting funds once, where the chain has a faucet.
      if (yield* repo.claimFunding(card.id, now)) {
        yield* wallet.fund(agentCard(card)).pipe(
          Effect.tapError((error) =>
            Effect.logWarning(`agent wallet funding failed; the next strategy update retries: ${error.message}`).pipe(
              Effect.annotateLogs("card.id", card.id)
            )
          ),
          Effect.catchAll(() => repo.releaseFunding(card.id))
        )
      }
      return strategyView(row)
    })

    const getStrategy = traced("Agent.getStrategy")(function* (address: Address) {
      return strategyView(yield* strategyOf(yield* cardOf(address)))
    })

    const portfolio = traced("Agent.portfolio")(function* (viewer: Option.Option<Address>) {
      const card = yield* accountOf(viewer)
      yield* Effect.annotateCurrentSpan("card.id", card.id)
      const strategy = yield* repo.findStrategy(card.id)
      const targets = Option.match(strategy, { onNone: () => ({}) as StrategyRow["targets"], onSome: (s) => s.targets })
      const [state, walletAddress] = yield* Effect.all(
        [readAccount(card, yield* Clock.currentTimeMillis), fromWallet(wallet.address(agentCard(card)))],
        { concurrency: "unbounded" }
      )
      const tokens = yield* shownTokens(state, targets)
      const cash = units(state.holdings.usd1, chain.usd1.decimals)
      const valued = tokens.map(({ balance, market: data, token }) => ({
        symbol: token.symbol,
        address: token.address,
        balance: formatUnits(state.holdings.tokens.get(token.address) ?? 0n, token.decimals),
        valueUsd: balance * data.tokenPrice,
        target: targets[token.symbol] ?? 0,
        market: data
      }))
      const holdings = [
        ...valued,
        {
          symbol: CASH_SYMBOL,
          address: chain.usd1.address,
          balance: formatUnits(state.holdings.usd1, chain.usd1.decimals),
          valueUsd: cash,
          target: 0,
          market: null
        }
      ]
      const totalUsd = holdings.reduce((sum, holding) => sum + holding.valueUsd, 0)
      return new Portfolio({
        wallet: walletAddress,
        card: { address: card.address, usd1: state.cardUsd1 },
        totalUsd,
        holdings: holdings.map((holding) => ({ ...holding, weight: totalUsd > 0 ? holding.valueUsd / totalUsd : 0 }))
      })
    })

    const preview = traced("Agent.preview")(function* (viewer: Option.Option<Address>, at?: number) {
      const card = yield* accountOf(viewer)
      yield* Effect.annotateCurrentSpan("card.id", card.id)
      const instant = at ?? (yield* Clock.currentTimeMillis)
      const closures = market.settings.closures
      const strategy = yield* repo.findStrategy(card.id)
      if (Option.isNone(strategy)) {
        const spending = yield* spendingOf(card, instant)
        return new Preview({ at: instant, mode, decision: withoutStrategy({ at: instant, spending, closures }) })
      }
      const { targets, timeZone, weeklySpendUsd } = strategy.value
      const [state, spending, committed] = yield* Effect.all(
        [readAccount(card, instant), spendingOf(card, instant), debts.commitments([card.id], instant)],
        { concurrency: "unbounded" }
      )
      const tokens = yield* shownTokens(state, targets)
      const decision = decide({
        at: instant,
        strategy: { targets, weeklySpendUsd, timeZone },
        cardUsd1: state.cardUsd1,
        // The loop also leaves out the repayments in doubt in its journal; the preview counts all that is owed.
        commitments: commitmentsOf(committed.get(card.id)!, 0n),
        walletUsd1: units(state.holdings.usd1, chain.usd1.decimals),
        tokens: tokens.map(({ balance, market: data, token }) => ({ symbol: token.symbol, balance, market: data })),
        spending,
        closures
      })
      return new Preview({ at: instant, mode, decision })
    })

    const decisions = traced("Agent.decisions")(function* (
      viewer: Option.Option<Address>,
      query: { readonly limit?: number; readonly before?: string }
    ) {
      const card = yield* accountOf(viewer)
      const rows = yield* repo.decisions({
        cardId: card.id,
        limit: query.limit ?? DEFAULT_PAGE_SIZE,
        before: query.before ?? null
      })
      return rows.map(decisionItem)
    })

    const session = fromWallet(wallet.session).pipe(Effect.withSpan("Agent.session"))

    return { putStrategy, getStrategy, portfolio, preview, decisions, session }
  }),
  dependencies: [AgentRepo.Default]
}) {}
