/**
 * The default `AgentWallet`: one on-chain account per card on the service's chain, trading through
 * the chain's exchange. A card's key is HMAC-SHA256(AGENT_WALLET_SEED, "agent-wallet:" + card id):
 * deterministic (the same wallet after a restart and on every replica), never stored, and distinct
 * per card. Neither the seed nor a key is ever logged.
 *
 * `fund` (on chains with a faucet: the embedded devnet, the in-memory chain) gives gas, $25 of USD1
 * and $1,000 of stock tokens split evenly over the registry tokens that are not paused, at their
 * current feed prices. It gives again each time it is called.
 */
import { createHmac, randomBytes } from "node:crypto"
import { Effect, Layer, Option, Redacted } from "effect"
import { CallReverted, type ChainAccount, ChainClient, ChainError } from "../chain/ChainClient.js"
import { type StockToken, TokenRegistry } from "../chain/Tokens.js"
import { type SecretName, Secrets } from "../runtime/Secrets.js"
import { type AgentCard, AgentWallet, AgentWalletError, type WalletHoldings, type WalletTrade } from "./AgentWallet.js"

/** The seed every agent wallet key is derived from; a development file in DATA_DIR when unset. */
export const AGENT_WALLET_SEED: SecretName = {
  variable: "AGENT_WALLET_SEED",
  file: "agent-wallet.seed",
  generate: () => randomBytes(32).toString("hex")
}

/** A new wallet's starting funds where the chain has a faucet: USD1 cash, and stock tokens worth this much in all. */
const STARTING_USD1 = 25n
const STARTING_STOCKS_USD = 1_000n

/** Derived accounts a replica keeps (each holds its key): the cards of the last few pages it traded for. */
const MAX_CACHED_ACCOUNTS = 10_000

/** The private key of a card's agent wallet. */
export const agentWalletKey = (seed: Redacted.Redacted<string>, cardId: string): Redacted.Redacted<`0x${string}`> =>
  Redacted.make<`0x${string}`>(
    `0x${createHmac("sha256", Redacted.value(seed)).update(`agent-wallet:${cardId}`).digest("hex")}`
  )

/** `usd` (USD1 atomic units) worth of a token at its feed answer, in the token's atomic units. */
const tokensWorth = (
  usd: bigint,
  usd1Decimals: number,
  round: { readonly answer: bigint; readonly decimals: number },
  tokenDecimals: number
): bigint =>
  round.answer <= 0n
    ? 0n
    : (usd * 10n ** BigInt(round.decimals) * 10n ** BigInt(tokenDecimals)) /
      (round.answer * 10n ** BigInt(usd1Decimals))

const dollars = (whole: bigint, usd1Decimals: number): bigint => whole * 10n ** BigInt(usd1Decimals)

const walletError = (what: string) => (error: ChainError | CallReverted) =>
  new AgentWalletError({
    code: "AGENT_WALLET_ERROR",
    message:
      error instanceof CallReverted
        ? `${what} was refused by the chain: ${error.reason}`
        : `${what} failed: ${error.message}`,
    cause: error
  })

/** Maps the chain's failures to the port's error and lets the caller's own (`record`'s) through. */
const asWalletFailure =
  (what: string) =>
  <A, E, R>(effect: Effect.Effect<A, ChainError | CallReverted | E, R>): Effect.Effect<A, AgentWalletError | E, R> =>
    Effect.catchIf(
      effect,
      (error): error is ChainError | CallReverted => error instanceof ChainError || error instanceof CallReverted,
      (error) => Effect.fail(walletError(what)(error))
    )

export const ChainAgentWallet = Layer.effect(
  AgentWallet,
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const registry = yield* TokenRegistry
    const seed = yield* (yield* Secrets).secret(AGENT_WALLET_SEED)

    /**
     * Deriving an account costs an elliptic-curve multiplication: kept for the cards seen lately
     * (bounded, so that a replica's memory does not grow with the programme; the loop keeps every
     * wallet's address in the database and passes it, so reads derive nothing).
     */
    const accounts = new Map<string, ChainAccount>()
    const accountOf = (card: AgentCard) => {
      const known = accounts.get(card.id)
      if (known !== undefined) return known
      const account = chain.account(agentWalletKey(seed, card.id))
      if (accounts.size >= MAX_CACHED_ACCOUNTS) accounts.clear()
      accounts.set(card.id, account)
      return account
    }
    const walletOf = (card: AgentCard) => card.wallet ?? accountOf(card).address

    const holdings = (cards: ReadonlyArray<AgentCard>) => {
      const tokens = [chain.usd1.address, ...registry.tokens.map((token) => token.address)]
      return chain.balances(cards.map(walletOf), tokens).pipe(
        Effect.map((rows) =>
          rows.map(
            ([usd1 = 0n, ...held]): WalletHoldings => ({
              usd1,
              tokens: new Map(registry.tokens.map((token, j) => [token.address, held[j] ?? 0n] as const))
            })
          )
        ),
        Effect.mapError(walletError("reading the agent wallets' holdings")),
        Effect.withSpan("AgentWallet.holdings", { attributes: { cards: cards.length } })
      )
    }

    const fund = (card: AgentCard) =>
      Option.match(chain.faucet, {
        onNone: () => Effect.void,
        onSome: (faucet) =>
          Effect.gen(function* () {
            // A paused token cannot be minted: the budget goes to the others.
            const tradable = yield* Effect.filter(
              registry.tokens,
              (token) => Effect.map(chain.tokenPaused(token.address), (paused) => !paused),
              { concurrency: "unbounded" }
            )
            const perToken =
              tradable.length === 0 ? 0n : dollars(STARTING_STOCKS_USD, chain.usd1.decimals) / BigInt(tradable.length)
            const grants = yield* Effect.forEach(
              tradable,
              (token: StockToken) =>
                Effect.map(chain.feedRound(token.feed), (round) => ({
                  token: token.address,
                  amount: tokensWorth(perToken, chain.usd1.decimals, round, token.decimals)
                })),
              { concurrency: "unbounded" }
            )
            yield* faucet.fund(accountOf(card).address, {
              usd1: dollars(STARTING_USD1, chain.usd1.decimals),
              tokens: grants
            })
          }).pipe(
            Effect.mapError(walletError("funding the agent wallet")),
            Effect.withSpan("AgentWallet.fund", { attributes: { "card.id": card.id } })
          )
      })

    /** The card's account's `side` of the exchange, its failures the wallet's, in a span. */
    const trade =
      (side: "sell" | "buy", doing: string): WalletTrade =>
      (card, token, amountIn, minOut, record) =>
        accountOf(card)
          [side](token.address, amountIn, minOut, record)
          .pipe(
            asWalletFailure(`${doing} ${token.symbol}`),
            Effect.withSpan(`AgentWallet.${side}`, { attributes: { "card.id": card.id, token: token.symbol } })
          )

    return AgentWallet.of({
      address: (card) => Effect.sync(() => walletOf(card)),
      holdings,
      sell: trade("sell", "selling"),
      buy: trade("buy", "buying"),
      sendUsd1: (card, amount, record) =>
        accountOf(card)
          .transferUsd1(card.address, amount, record)
          .pipe(
            asWalletFailure("sending USD1 to the card"),
            Effect.withSpan("AgentWallet.sendUsd1", { attributes: { "card.id": card.id } })
          ),
      repayUsd1: (card, to, amount, record) =>
        accountOf(card)
          .transferUsd1(to, amount, record)
          .pipe(
            asWalletFailure("repaying the card program"),
            Effect.withSpan("AgentWallet.repayUsd1", { attributes: { "card.id": card.id } })
          ),
      session: Effect.succeed({ connected: true }),
      fund
    })
  })
)
