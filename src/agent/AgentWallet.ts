/**
 * The agent-wallet port: the wallet the agent trades from on behalf of one card. It holds stock
 * tokens and some USD1 cash, sells tokens for USD1, buys tokens with USD1, sends USD1 to the card and
 * repays what the card owes the card program.
 *
 * Implementations: `ChainAgentWallet` (one wallet per card, its key derived from
 * `AGENT_WALLET_SEED`, trading through `EXCHANGE_ADDRESS` on the service's chain), and
 * `ScriptedAgentWallet` (tests). An exchange's custodial agent-wallet API is another Layer of this
 * Tag; its sign-in failures map to the `SESSION_EXPIRED` and `NOT_LOGGED_IN` codes.
 *
 * Every write takes a `record` step that runs after the transaction is signed and before it is
 * broadcast, so the caller can persist it first (crash recovery) and, by failing, stop it.
 */
import { Context, Data, type Effect } from "effect"
import type { Address } from "../chain/Address.js"
import type { RecordSigned, SignedTransaction } from "../chain/ChainClient.js"
import type { StockToken } from "../chain/Tokens.js"

/** The card an agent wallet serves: its id and the card's own USD1 address. */
export interface AgentCard {
  readonly id: string
  readonly address: Address
  /** The wallet's address when the caller knows it already (the loop keeps it): reading needs no key. */
  readonly wallet?: Address
}

export type AgentWalletErrorCode = "SESSION_EXPIRED" | "NOT_LOGGED_IN" | "AGENT_WALLET_ERROR"

export class AgentWalletError extends Data.TaggedError("AgentWalletError")<{
  readonly code: AgentWalletErrorCode
  readonly message: string
  readonly cause?: unknown
}> {}

/** What one agent wallet holds, atomic units. */
export interface WalletHoldings {
  readonly usd1: bigint
  /** Every registry token, by token address (EIP-55). */
  readonly tokens: ReadonlyMap<Address, bigint>
}

export interface WalletSession {
  readonly connected: boolean
  /** When the wallet's sign-in expires (ms since epoch), for wallets that have one. */
  readonly expiresAt?: number
}

/** A trade of the card's wallet through the exchange: `amountIn` paid for at least `minOut`. */
export type WalletTrade = <E, R>(
  card: AgentCard,
  token: StockToken,
  amountIn: bigint,
  minOut: bigint,
  record: RecordSigned<E, R>
) => Effect.Effect<SignedTransaction, AgentWalletError | E, R>

export interface AgentWalletShape {
  readonly address: (card: AgentCard) => Effect.Effect<Address, AgentWalletError>
  /** The holdings of each card's wallet, in the order given (read in bulk). */
  readonly holdings: (cards: ReadonlyArray<AgentCard>) => Effect.Effect<ReadonlyArray<WalletHoldings>, AgentWalletError>
  /** Sells `amountIn` of `token` for at least `minOut` USD1, paid into the wallet. */
  readonly sell: WalletTrade
  /** Buys `token` with `amountIn` USD1 for at least `minOut` of the token. */
  readonly buy: WalletTrade
  /** Sends `amount` USD1 from the wallet to the card's address. */
  readonly sendUsd1: <E, R>(
    card: AgentCard,
    amount: bigint,
    record: RecordSigned<E, R>
  ) => Effect.Effect<SignedTransaction, AgentWalletError | E, R>
  /**
   * Sends `amount` USD1 from the wallet straight to the card program's settlement account `to`,
   * repaying what the card owes (the card wallet's allowance plays no part).
   */
  readonly repayUsd1: <E, R>(
    card: AgentCard,
    to: Address,
    amount: bigint,
    record: RecordSigned<E, R>
  ) => Effect.Effect<SignedTransaction, AgentWalletError | E, R>
  /** Whether the wallet's provider session is usable (an on-chain key always is). */
  readonly session: Effect.Effect<WalletSession, AgentWalletError>
  /**
   * Gives a new card's wallet its starting funds where the chain has a faucet (the embedded devnet,
   * the in-memory chain): gas, some USD1 and about $1,000 of stock tokens split evenly over the
   * registry. Elsewhere it does nothing.
   */
  readonly fund: (card: AgentCard) => Effect.Effect<void, AgentWalletError>
}

export class AgentWallet extends Context.Tag("app/AgentWallet")<AgentWallet, AgentWalletShape>() {}
