/**
 * The chain port: what this service needs from an EVM chain, in the domain's words. Nothing here
 * names a viem client; `EvmChain` implements it over JSON-RPC and `InMemoryChain` in memory (tests).
 *
 * Amounts are atomic units (bigint), times are seconds of block time, addresses EIP-55.
 */
import { Config, Context, Data, Duration, Effect, type Either, Option, type Redacted } from "effect"
import type { Hash, Hex } from "viem"
import type { Address } from "./Address.js"

export class ChainError extends Data.TaggedError("ChainError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/** The call was refused before anything was broadcast (simulation reverted); `reason` is the revert text. */
export class CallReverted extends Data.TaggedError("CallReverted")<{ readonly reason: string }> {}

/** The USD1 token and the EIP-712 domain its authorizations are signed under. */
export interface Usd1Token {
  readonly address: Address
  readonly decimals: number
  readonly name: string
  readonly version: string
}

/** An EIP-3009 `TransferWithAuthorization` as signed by the payer. */
export interface TransferAuthorization {
  readonly from: Address
  readonly to: Address
  readonly value: bigint
  readonly validAfter: bigint
  readonly validBefore: bigint
  readonly nonce: Hex
}

/** What an owner signs (EIP-2612) to let `spender` move up to `value` of its USD1 (submittable until `deadline`, seconds). */
export interface Permit {
  readonly owner: Address
  readonly spender: Address
  readonly value: bigint
  readonly nonce: bigint
  readonly deadline: bigint
}

/** A transaction signed by one of our accounts (a relayer key, an agent wallet), recorded before it is broadcast. */
export interface SignedTransaction {
  /** The account that signed it. */
  readonly sender: Address
  readonly hash: Hash
  readonly raw: Hex
  readonly nonce: number
}

/** An ERC-20 Transfer event of a mined transaction. */
export interface TokenTransfer {
  readonly token: Address
  readonly from: Address
  readonly to: Address
  readonly value: bigint
}

/** A mined transaction, as far as this service reads it. */
export interface Receipt {
  readonly hash: Hash
  readonly status: "success" | "reverted"
  /** Reverted having used all the gas it was given: with more gas it may go through. */
  readonly outOfGas: boolean
  readonly transfers: ReadonlyArray<TokenTransfer>
  /** The block it was mined in, on the chain as the node sees it now. */
  readonly blockNumber: bigint
  readonly blockHash: Hash
}

/** What a relayed `transferWithAuthorization` meets on chain now, read at once. */
export interface TransferCheck {
  /** The authorization's nonce was used or cancelled. */
  readonly used: boolean
  /** The payer's USD1. */
  readonly balance: bigint
  /** The transfer, simulated now, would revert: why (the token's revert text or error name). */
  readonly refusal: Option.Option<string>
}

/**
 * What re-sending a signed transaction found: the node has it (pooled or mined), its nonce went
 * to another transaction, so it can never be mined, or the node refuses its fee for now (a fee
 * spike: the chain answered, and the transaction may be accepted once fees fall, or be bumped).
 */
export type Rebroadcast = "known" | "replaced" | "underpriced"

/** A Chainlink AggregatorV3-style feed's latest round. */
export interface FeedRound {
  /** The answer as an integer with `decimals` decimals. */
  readonly answer: bigint
  readonly decimals: number
  /** Block time of the round's update, seconds. */
  readonly updatedAt: bigint
}

/** A stock token's feed round and pause flag, read together. */
export interface FeedState {
  readonly round: FeedRound
  readonly paused: boolean
}

/** A transaction the relayer signed and recorded, as its journal keeps it. */
export interface RecordedTransaction {
  readonly nonce: number
  readonly raw: Hex
}

/**
 * A relayer key's recorded transactions with a nonce from `fromNonce` up that may still be sent
 * (their authorization still valid), in nonce order: what closes a nonce gap.
 */
export type Resendable = (
  sender: Address,
  fromNonce: number
) => Effect.Effect<ReadonlyArray<RecordedTransaction>, ChainError>

/**
 * What comparing the relayer's next nonce with the chain's pending count found: `resent` recorded
 * transactions sent again (byte-identical) and `filled` nonces given an empty transaction, so that
 * nothing from `chainNext` to `next` is missing any more.
 */
export interface NonceCheck {
  readonly chainNext: number
  readonly next: number
  readonly resent: number
  readonly filled: number
}

/**
 * Why a transaction was signed: the write asked for, or the approval of the exchange that a
 * wallet's first trade of a token needs before it (a reorg can take both away, so both are journaled).
 */
export type SignedPurpose = "write" | "approval"

/** Persists a signed transaction before it is broadcast; failing stops the broadcast. */
export type RecordSigned<E, R> = (signed: SignedTransaction, purpose: SignedPurpose) => Effect.Effect<void, E, R>

/**
 * Transactions signed by one of the service's own accounts (an agent wallet), sent in order from
 * one queue per account. Each write simulates first (a revert fails with `CallReverted`, nothing
 * sent), signs, lets `record` persist the signed transaction, then broadcasts it.
 */
export interface ChainAccount {
  readonly address: Address
  /** Sells `amountIn` of the stock token `token` for at least `minOut` USD1. */
  readonly sell: Trade
  /** Buys the stock token `token` with `amountIn` USD1, for at least `minOut` of it. */
  readonly buy: Trade
  /**
   * The account's transaction count: `pending` (the nonce its next transaction takes, counting what
   * the node holds) or `latest` (how many of its transactions are mined).
   */
  readonly nonce: (at: "pending" | "latest") => Effect.Effect<number, ChainError>
  /** The gas the USD1 call takes from this account now (the pending state), with a margin; a call that would revert is `CallReverted`. */
  readonly estimate: (call: Usd1Call) => Effect.Effect<bigint, ChainError | CallReverted>
  /**
   * The USD1 call signed at `nonce` with `gas` and the fees now, not sent: for an account whose
   * nonces its caller keeps in a journal (it records the transaction, then broadcasts it:
   * `ChainClient.rebroadcast`).
   */
  readonly sign: (call: Usd1Call, gas: bigint, nonce: number) => Effect.Effect<SignedTransaction, ChainError>
  /**
   * A transaction of this account not mined RELAYER_STUCK_AFTER after `signedAt`, signed again at its
   * nonce with fees raised by at least 12.5 % (and to at least the estimate now), within
   * MAX_FEE_PER_GAS, at most RELAYER_MAX_FEE_BUMPS times (`bumps` done so far); not sent. None when
   * it is not due or no raise is left (it can only wait).
   */
  readonly bump: (stuck: {
    readonly raw: Hex
    readonly signedAt: Date
    readonly bumps: number
  }) => Effect.Effect<Option.Option<SignedTransaction>, ChainError>
  /** Transfers `amount` USD1 to `to`. */
  readonly transferUsd1: <E, R>(
    to: Address,
    amount: bigint,
    record: RecordSigned<E, R>
  ) => Effect.Effect<SignedTransaction, ChainError | CallReverted | E, R>
}

/** A call of the USD1 token that one of the service's own accounts makes. */
export type Usd1Call =
  /** Takes `amount` from `from` under the allowance `from` gave the sender. */
  | { readonly _tag: "TransferFrom"; readonly from: Address; readonly to: Address; readonly amount: bigint }
  | { readonly _tag: "Transfer"; readonly to: Address; readonly amount: bigint }
  /** Submits an owner's signed EIP-2612 permit (anyone may: the signature is the owner's consent). */
  | { readonly _tag: "Permit"; readonly permit: Permit; readonly signature: Hex }

/**
 * A trade on the exchange of a stock token against USD1: `amountIn` of what the account pays for at
 * least `minOut` of what it gets, paid to the account.
 */
export type Trade = <E, R>(
  token: Address,
  amountIn: bigint,
  minOut: bigint,
  record: RecordSigned<E, R>
) => Effect.Effect<SignedTransaction, ChainError | CallReverted | E, R>

/** Tokens out of nothing, on a chain that allows it (the embedded devnet, the in-memory chain). */
export interface Faucet {
  /** Gives `to` gas, `usd1` USD1 and the given stock tokens. */
  readonly fund: (
    to: Address,
    grant: {
      readonly usd1: bigint
      readonly tokens: ReadonlyArray<{ readonly token: Address; readonly amount: bigint }>
    }
  ) => Effect.Effect<void, ChainError>
}

/** One JSON-RPC endpoint of the chain, as `/ready` shows it (never its URL: it may hold an API key). */
export interface RpcEndpointState {
  /** Its position in CHAIN_RPC_URL (then CHAIN_RPC_URLS), from 1. */
  readonly endpoint: number
  /** `up`: in use; `down`: its last call or probe got no answer; `unchecked`: its chain id is not known yet. */
  readonly state: "up" | "down" | "unchecked" | "wrong-chain"
  /** Mean latency of its recent probes (only several endpoints are probed). */
  readonly latencyMs: number | undefined
  /** Why it is in a backoff after its own fault (reads go to the others first), if it is. */
  readonly degraded: "rate-limited" | "server-error" | undefined
}

export interface ChainClientShape {
  readonly chainId: number
  /** CAIP-2 id, `eip155:<chainId>`, as x402 names networks. */
  readonly network: `eip155:${number}`
  readonly usd1: Usd1Token
  /**
   * The relayer pool: the keys that pay gas for relayed transactions (RELAYER_PRIVATE_KEYS), each
   * with its own nonce sequence; payments are spread over those that can pay gas.
   */
  readonly relayers: ReadonlyArray<Address>
  /**
   * Whether some relayer key's gas balance, as last read (cached: no call), pays its next
   * transaction (gas limit × max fee). A key that cannot leaves the rotation. Until a first reading, yes.
   */
  readonly relayerFunded: Effect.Effect<boolean>
  /**
   * Whether the chain's base fee is above MAX_FEE_PER_GAS and every relayer key in the rotation holds
   * RELAYER_MAX_IN_FLIGHT transactions waiting for it to fall (cached: no call): a new settlement
   * would only wait for a slot.
   */
  readonly relayerPricedOut: Effect.Effect<boolean>

  /**
   * Whether `address` signed `message` (EIP-191): an EOA locally, a contract wallet through
   * ERC-1271/6492. A chain that does not answer is a `ChainError`, never "not signed".
   */
  readonly verifyMessage: (address: Address, message: string, signature: Hex) => Effect.Effect<boolean, ChainError>
  readonly balanceOf: (token: Address, owner: Address) => Effect.Effect<bigint, ChainError>
  /**
   * Every owner's balance of every token in one read (a multicall, chunked when large):
   * `result[i][j]` is `owners[i]`'s balance of `tokens[j]`.
   */
  readonly balances: (
    owners: ReadonlyArray<Address>,
    tokens: ReadonlyArray<Address>
  ) => Effect.Effect<ReadonlyArray<ReadonlyArray<bigint>>, ChainError>
  /**
   * Every address that sent or received USD1, or gave or was given an allowance of it, in blocks
   * `fromBlock` to `toBlock` (both included), once each: the parties of the token's `Transfer` and
   * `Approval` logs (the zero address for a mint or a burn), so that whoever keeps balances and
   * allowances reads again only those that may have changed.
   */
  readonly usd1Parties: (fromBlock: bigint, toBlock: bigint) => Effect.Effect<ReadonlyArray<Address>, ChainError>
  /**
   * Each owner's USD1 balance and its USD1 allowance to `spender`, at the latest block, in one read
   * (a multicall, chunked when large), in the order of `owners`.
   */
  readonly usd1Positions: (
    owners: ReadonlyArray<Address>,
    spender: Address
  ) => Effect.Effect<ReadonlyArray<{ readonly usd1: bigint; readonly allowance: bigint }>, ChainError>
  /** The EIP-2612 nonce the owner's next USD1 permit must carry. */
  readonly permitNonce: (owner: Address) => Effect.Effect<bigint, ChainError>
  /**
   * In one read: whether the authorization's nonce is used, the payer's USD1, and whether relaying
   * the transfer now would revert. The simulated transfer is the token's own check of everything,
   * the signature included (an EOA's, or a contract wallet's through ERC-1271).
   */
  readonly transferCheck: (
    authorization: TransferAuthorization,
    signature: Hex
  ) => Effect.Effect<TransferCheck, ChainError>
  /** Whether the authorizer's nonce was used or cancelled on the USD1 token. */
  readonly authorizationState: (authorizer: Address, nonce: Hex) => Effect.Effect<boolean, ChainError>
  /** The transaction in which the authorizer's nonce was used (its `AuthorizationUsed` event), if any. */
  readonly authorizationUsedIn: (authorizer: Address, nonce: Hex) => Effect.Effect<Option.Option<Hash>, ChainError>
  /**
   * Whether the payer signed the EIP-3009 authorization under the USD1 domain: an EOA locally, a
   * contract wallet through ERC-1271, a smart account not deployed yet through ERC-6492 (deployed in
   * simulation only). A chain that does not answer is a `ChainError`, never "not signed".
   */
  readonly authorizationSigned: (
    authorization: TransferAuthorization,
    signature: Hex
  ) => Effect.Effect<boolean, ChainError>
  /** USD1's EIP-712 DOMAIN_SEPARATOR; none when the token does not expose it. */
  readonly usd1DomainSeparator: Effect.Effect<Option.Option<Hex>, ChainError>

  /**
   * Relays `transferWithAuthorization` from the relayer, pipelined (its queue orders nonces, signatures
   * and records; broadcasts overlap, up to RELAYER_MAX_IN_FLIGHT sends of a key at once): simulates
   * the exact call against the pending state right before signing it (a call that would revert is
   * `CallReverted`, nothing signed or sent: the relayer never pays gas for a transfer that cannot
   * succeed, whatever was checked before), signs it, lets `record` persist the signed transaction,
   * then broadcasts it. A failure of `record` stops it before the broadcast. A node that refuses the
   * transaction for a stale nonce gets it simulated, signed anew (and recorded again) once; one it
   * refuses for its fee waits at its nonce (answered as sent), keeping one of the key's
   * RELAYER_MAX_IN_FLIGHT slots until it is mined or the base fee is within MAX_FEE_PER_GAS: a send
   * finding none free waits for one.
   * `simulated`: the caller ran this exact call against the pending state and nothing of ours that
   * could change its outcome went out since; a (v, r, s) transfer whose gas is known is then
   * signed without simulating it again (one call less per payment; docs/merchant.md says why that
   * is safe). A contract wallet's signature is always simulated again.
   */
  readonly transferWithAuthorization: <E, R>(
    authorization: TransferAuthorization,
    signature: Hex,
    record: (signed: SignedTransaction) => Effect.Effect<void, E, R>,
    resendable?: Resendable,
    simulated?: boolean
  ) => Effect.Effect<SignedTransaction, ChainError | CallReverted | E, R>
  /**
   * The relayer's nonce follows the chain: its next nonce is compared with the chain's pending count
   * and every nonce in between is sent again from `resendable` (the very same signed transaction) or
   * filled with an empty transaction, in order, so that no gap holds later transactions queued. A
   * relayer that does not know its next nonce (after a start, a failed send) takes the chain's count
   * and resends what was recorded above it. Runs in the relayer's send queue; a send that does not
   * know its nonce runs it first when given `resendable`.
   */
  readonly followRelayerNonce: (resendable: Resendable) => Effect.Effect<ReadonlyArray<NonceCheck>, ChainError>
  /**
   * A relayer transaction not mined RELAYER_STUCK_AFTER after `signedAt` is replaced: the same call
   * and nonce signed with fees raised by at least 12.5 % (and to at least the estimate now), within
   * MAX_FEE_PER_GAS, at most RELAYER_MAX_FEE_BUMPS times (`bumps` done so far); `record` persists it
   * before it is broadcast. None when it is not due or no bump is left (it can only wait).
   */
  readonly replaceStuck: <E, R>(
    stuck: { readonly sender: Address; readonly raw: Hex; readonly signedAt: Date; readonly bumps: number },
    record: RecordSigned<E, R>
  ) => Effect.Effect<Option.Option<SignedTransaction>, ChainError | E, R>
  /**
   * Waits until the relayer's nonce should be checked at once, not at the next tick: the chain's
   * head went back (a reorg, a node restored from an older state), a relayer's transaction was not
   * mined within its wait, or the chain counts fewer pending transactions than the relayer has sent.
   * Answers why. Several reasons before a check make one check.
   */
  readonly relayerNonceAlarm: Effect.Effect<string>
  /**
   * Why the relayer cannot send now, if it cannot: a nonce gap whose close failed, or the chain's
   * pending count below the relayer's next nonce for longer than RELAYER_NONCE_GAP_STUCK_AFTER.
   */
  readonly relayerNonceTrouble: Effect.Effect<Option.Option<string>>
  /**
   * Sends an already signed transaction again (crash recovery). "Already known" or "nonce too low"
   * is `known` only when the node knows the transaction itself; `replaced` when its nonce was used
   * by another transaction; `underpriced` when the node wants a higher fee now (not an outage).
   */
  readonly rebroadcast: (raw: Hex) => Effect.Effect<Rebroadcast, ChainError>
  /** The receipt, waiting up to `timeoutMs`; none when the transaction is not mined by then. */
  readonly receipt: (hash: Hash, timeoutMs: number) => Effect.Effect<Option.Option<Receipt>, ChainError>

  readonly feedRound: (feed: Address) => Effect.Effect<FeedRound, ChainError>
  /** A stock token's `paused()` flag; false for a token without one. */
  readonly tokenPaused: (token: Address) => Effect.Effect<boolean, ChainError>
  /**
   * Every given token's feed round and `paused()` flag in one read (a multicall): per token, its
   * state or why its feed could not be read; a chain that does not answer fails them all.
   */
  readonly feedStates: (
    tokens: ReadonlyArray<{ readonly feed: Address; readonly token: Address }>
  ) => Effect.Effect<ReadonlyArray<Either.Either<FeedState, string>>, ChainError>
  /** The latest block's timestamp, seconds. */
  readonly blockTime: Effect.Effect<bigint, ChainError>
  /** The latest block's number. */
  readonly headBlock: Effect.Effect<bigint, ChainError>
  /**
   * The head as the block watcher last polled it (its number, its timestamp in seconds): at most a
   * poll old, and no call of its own, for what follows the chain on every tick (the relayer's tracker).
   */
  readonly watchedHead: Effect.Effect<{ readonly number: bigint; readonly time: bigint }, ChainError>

  /** The exchange that trades stock tokens for USD1 at the feed price, when the deployment has one. */
  readonly exchange: Option.Option<Address>
  /** Signs as the account of `key` (one of the service's own, e.g. an agent wallet). */
  readonly account: (key: Redacted.Redacted<Hex>) => ChainAccount
  /** Present on chains that can mint (the embedded devnet, the in-memory chain). */
  readonly faucet: Option.Option<Faucet>
  /** Each JSON-RPC endpoint's state, in configured order; none for a chain reached without JSON-RPC. */
  readonly endpoints: Effect.Effect<ReadonlyArray<RpcEndpointState>>
}

export class ChainClient extends Context.Tag("app/ChainClient")<ChainClient, ChainClientShape>() {}

/** Whether a receipt proves the payment: status success and the exact Transfer of the token. */
export const receiptShowsTransfer = (receipt: Receipt, expected: TokenTransfer): boolean =>
  receipt.status === "success" &&
  receipt.transfers.some(
    (transfer) =>
      transfer.token.toLowerCase() === expected.token.toLowerCase() &&
      transfer.from.toLowerCase() === expected.from.toLowerCase() &&
      transfer.to.toLowerCase() === expected.to.toLowerCase() &&
      transfer.value === expected.value
  )

// -------------------------------------------------------------------------------------------------
// Finality and bounds shared by the services that follow their transactions (merchant, agent)

/**
 * CHAIN_CONFIRMATIONS: how many blocks must be on top of a transaction's (its own included) before
 * the service counts it final and stops checking it is still on the canonical chain. Settlements
 * and the agent's transactions follow the same setting. Confirmations on a configured chain when
 * it is not set (docs/chains.md gives one per chain):
 */
const DEFAULT_CONFIRMATIONS = 10

const confirmationsSetting = Config.option(
  Config.integer("CHAIN_CONFIRMATIONS").pipe(
    Config.validate({
      message: "CHAIN_CONFIRMATIONS must be a whole number of blocks, 0 or more",
      validation: (blocks) => blocks >= 0
    })
  )
)

/** The confirmations to wait for on `chain`: none given, 0 on a chain that can mint (the devnet), else 10. */
export const chainConfirmations = (chain: Pick<ChainClientShape, "faucet">) =>
  Effect.map(confirmationsSetting, (blocks) =>
    BigInt(Option.getOrElse(blocks, () => (Option.isSome(chain.faucet) ? 0 : DEFAULT_CONFIRMATIONS)))
  )

/** Whether a transaction mined in `blockNumber` is final with the chain's head at `head`. */
export const isFinal = (blockNumber: bigint, head: bigint, confirmations: bigint) =>
  head - blockNumber + 1n >= confirmations

/** A chain call that does not answer within `timeout` (CHAIN_TIMEOUT) fails like an unreachable chain. */
export const withinChainTimeout =
  (timeout: Duration.Duration) =>
  <A, E, R>(call: Effect.Effect<A, E, R>) =>
    Effect.timeoutFail(call, {
      duration: timeout,
      onTimeout: () => new ChainError({ message: `no answer within ${Duration.format(timeout)}` })
    })
