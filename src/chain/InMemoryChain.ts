/**
 * An in-memory chain for tests and demos: a `ChainClient` and a `TokenRegistry` with no process
 * behind them. State lives in memory; signatures are checked for real (EOA signers only: a
 * contract wallet's signature is refused), block time is effect's `Clock` (so `TestClock` drives
 * it), and every transfer is "mined" at once. `InMemoryChain` itself is the control a test uses to
 * mint USD1, set feed prices and pause tokens.
 *
 *     layer(testServer({ ports: { chain: InMemoryChain.layer() } }))(...)
 */
import { Clock, Context, Effect, Layer, Option, Ref } from "effect"
import {
  encodeAbiParameters,
  getAddress,
  type Hash,
  type Hex,
  isAddressEqual,
  keccak256,
  parseUnits,
  recoverMessageAddress,
  recoverTypedDataAddress,
  toHex
} from "viem"
import type { Address } from "./Address.js"
import {
  CallReverted,
  ChainClient,
  type Receipt,
  type SignedTransaction,
  type TokenTransfer,
  type TransferAuthorization,
  type Usd1Token
} from "./ChainClient.js"
import { DEVNET_STOCK_FIXTURES } from "./Devnet.js"
import { transferWithAuthorizationTypedData } from "./Eip3009.js"
import { type StockToken, TokenRegistry } from "./Tokens.js"

/** A deterministic address for a name, so that test fixtures are stable. */
const addressFor = (name: string): Address => getAddress(`0x${keccak256(toHex(`in-memory:${name}`)).slice(26)}`)

const FEED_DECIMALS = 8

interface Feed {
  readonly answer: bigint
  readonly updatedAt: bigint
}

interface State {
  /** token (lower case) -> owner (lower case) -> balance */
  readonly balances: ReadonlyMap<string, ReadonlyMap<string, bigint>>
  /** `${authorizer}:${nonce}` (lower case) -> the transaction that used it */
  readonly authorizations: ReadonlyMap<string, Hash>
  readonly receipts: ReadonlyMap<Hash, Receipt>
  readonly feeds: ReadonlyMap<string, Feed>
  readonly paused: ReadonlySet<string>
  readonly transactions: number
}

const key = (...parts: ReadonlyArray<string>) => parts.join(":").toLowerCase()

const balanceIn = (state: State, token: Address, owner: Address) =>
  state.balances.get(token.toLowerCase())?.get(owner.toLowerCase()) ?? 0n

const withBalance = (state: State, token: Address, owner: Address, amount: bigint): State => {
  const balances = new Map(state.balances)
  const holders = new Map(balances.get(token.toLowerCase()) ?? [])
  holders.set(owner.toLowerCase(), amount)
  balances.set(token.toLowerCase(), holders)
  return { ...state, balances }
}

export interface InMemoryChainOptions {
  readonly chainId?: number
  /** USD1's EIP-712 domain, as the real token's. */
  readonly usd1?: { readonly name?: string; readonly version?: string }
}

export interface InMemoryChainShape {
  readonly usd1: Usd1Token
  readonly tokens: ReadonlyArray<StockToken>
  /** Creates tokens out of nothing (USD1 or a stock token). */
  readonly mint: (token: Address, to: Address, amount: bigint) => Effect.Effect<void>
  /** A token's balance. */
  readonly balanceOf: (token: Address, owner: Address) => Effect.Effect<bigint>
  /** Starts a new feed round for the stock `symbol` at `price` USD, stamped with the current block time. */
  readonly setPrice: (symbol: string, price: number) => Effect.Effect<void>
  readonly setPaused: (symbol: string, paused: boolean) => Effect.Effect<void>
  /** Every transfer made so far, oldest first. */
  readonly transfers: Effect.Effect<ReadonlyArray<TokenTransfer & { readonly hash: Hash }>>
}

export class InMemoryChain extends Context.Tag("app/InMemoryChain")<InMemoryChain, InMemoryChainShape>() {
  /** The in-memory `ChainClient`, its `TokenRegistry` (the devnet's five stocks) and this control. */
  static readonly layer = (options: InMemoryChainOptions = {}) => Layer.effectContext(make(options))
}

const make = (options: InMemoryChainOptions) =>
  Effect.gen(function* () {
    const chainId = options.chainId ?? 31337
    const usd1: Usd1Token = {
      address: addressFor("USD1"),
      decimals: 18,
      name: options.usd1?.name ?? "World Liberty Financial USD",
      version: options.usd1?.version ?? "1"
    }
    const tokens: ReadonlyArray<StockToken> = DEVNET_STOCK_FIXTURES.map((fixture) => ({
      symbol: fixture.ticker,
      ticker: fixture.ticker,
      name: fixture.name,
      address: addressFor(`${fixture.ticker} token`),
      feed: addressFor(`${fixture.ticker} feed`),
      decimals: 18,
      platform: "devnet"
    }))
    const relayer = addressFor("relayer")
    const now = Effect.map(Clock.currentTimeMillis, (ms) => BigInt(Math.floor(ms / 1000)))
    const startedAt = yield* now
    const state = yield* Ref.make<State>({
      balances: new Map(),
      authorizations: new Map(),
      receipts: new Map(),
      feeds: new Map(
        DEVNET_STOCK_FIXTURES.map((fixture, i) => [
          tokens[i]!.feed.toLowerCase(),
          { answer: parseUnits(fixture.initialPrice.toFixed(FEED_DECIMALS), FEED_DECIMALS), updatedAt: startedAt }
        ])
      ),
      paused: new Set(),
      transactions: 0
    })
    /** One writer at a time, as one relayer's ordered send queue. */
    const sendQueue = yield* Effect.makeSemaphore(1)

    const stock = (symbol: string) =>
      Option.fromNullable(tokens.find((token) => token.symbol === symbol.toUpperCase())).pipe(
        Option.getOrThrowWith(() => new Error(`unknown in-memory stock ${symbol}`))
      )

    const signedBy = async (address: Address, recover: () => Promise<Address>) => {
      const recovered = await recover().catch(() => undefined)
      return recovered !== undefined && isAddressEqual(recovered, address)
    }

    /** The token's checks, in its order, with its revert messages. */
    const refusal = (current: State, authorization: TransferAuthorization, signed: boolean, blockTime: bigint) => {
      if (blockTime <= authorization.validAfter) return "USD1: authorization is not yet valid"
      if (blockTime >= authorization.validBefore) return "USD1: authorization is expired"
      if (current.authorizations.has(key(authorization.from, authorization.nonce))) {
        return "USD1: authorization is used or canceled"
      }
      if (!signed) return "USD1: invalid signature"
      if (balanceIn(current, usd1.address, authorization.from) < authorization.value) {
        return "ERC20InsufficientBalance: transfer amount exceeds balance"
      }
      return undefined
    }

    const transferWithAuthorization = <E, R>(
      authorization: TransferAuthorization,
      signature: Hex,
      record: (signed: SignedTransaction) => Effect.Effect<void, E, R>
    ) =>
      sendQueue.withPermits(1)(
        Effect.gen(function* () {
          const signed = yield* Effect.promise(() =>
            signedBy(authorization.from, () =>
              recoverTypedDataAddress({
                signature,
                ...transferWithAuthorizationTypedData(authorization, { chainId, usd1 })
              })
            )
          )
          const blockTime = yield* now
          const reason = refusal(yield* Ref.get(state), authorization, signed, blockTime)
          if (reason !== undefined) return yield* new CallReverted({ reason })
          const count = (yield* Ref.get(state)).transactions
          const raw = encodeAbiParameters(
            [{ type: "uint256" }, { type: "address" }, { type: "bytes32" }],
            [BigInt(count), authorization.from, authorization.nonce]
          )
          const transaction: SignedTransaction = { hash: keccak256(raw), raw, nonce: count }
          yield* record(transaction)
          const transfer: TokenTransfer = {
            token: usd1.address,
            from: authorization.from,
            to: authorization.to,
            value: authorization.value
          }
          yield* Ref.update(state, (current) => {
            const debited = withBalance(
              current,
              usd1.address,
              authorization.from,
              balanceIn(current, usd1.address, authorization.from) - authorization.value
            )
            const credited = withBalance(
              debited,
              usd1.address,
              authorization.to,
              balanceIn(debited, usd1.address, authorization.to) + authorization.value
            )
            return {
              ...credited,
              transactions: current.transactions + 1,
              authorizations: new Map(current.authorizations).set(
                key(authorization.from, authorization.nonce),
                transaction.hash
              ),
              receipts: new Map(current.receipts).set(transaction.hash, {
                hash: transaction.hash,
                status: "success",
                transfers: [transfer]
              })
            }
          })
          return transaction
        })
      )

    const feedOf = (feed: Address) =>
      Effect.map(Ref.get(state), (current) =>
        Option.getOrThrowWith(
          Option.fromNullable(current.feeds.get(feed.toLowerCase())),
          () => new Error(`no in-memory feed at ${feed}`)
        )
      )

    const client = ChainClient.of({
      chainId,
      network: `eip155:${chainId}`,
      usd1,
      relayer,
      verifyMessage: (address, message, signature) =>
        Effect.promise(() => signedBy(address, () => recoverMessageAddress({ message, signature }))),
      verifyAuthorization: (authorization, signature) =>
        Effect.promise(() =>
          signedBy(authorization.from, () =>
            recoverTypedDataAddress({
              signature,
              ...transferWithAuthorizationTypedData(authorization, { chainId, usd1 })
            })
          )
        ),
      balanceOf: (token, owner) => Effect.map(Ref.get(state), (current) => balanceIn(current, token, owner)),
      authorizationState: (authorizer, nonce) =>
        Effect.map(Ref.get(state), (current) => current.authorizations.has(key(authorizer, nonce))),
      authorizationUsedIn: (authorizer, nonce) =>
        Effect.map(Ref.get(state), (current) =>
          Option.fromNullable(current.authorizations.get(key(authorizer, nonce)))
        ),
      usd1DomainSeparator: Effect.succeedNone,
      transferWithAuthorization,
      rebroadcast: () => Effect.void,
      receipt: (hash) => Effect.map(Ref.get(state), (current) => Option.fromNullable(current.receipts.get(hash))),
      feedRound: (feed) =>
        Effect.map(feedOf(feed), ({ answer, updatedAt }) => ({ answer, decimals: FEED_DECIMALS, updatedAt })),
      tokenPaused: (token) => Effect.map(Ref.get(state), (current) => current.paused.has(token.toLowerCase())),
      blockTime: now
    })

    const control = InMemoryChain.of({
      usd1,
      tokens,
      mint: (token, to, amount) =>
        Ref.update(state, (current) => withBalance(current, token, to, balanceIn(current, token, to) + amount)),
      balanceOf: (token, owner) => Effect.map(Ref.get(state), (current) => balanceIn(current, token, owner)),
      setPrice: (symbol, price) =>
        Effect.gen(function* () {
          const feed = stock(symbol).feed.toLowerCase()
          const updatedAt = yield* now
          const answer = parseUnits(price.toFixed(FEED_DECIMALS), FEED_DECIMALS)
          yield* Ref.update(state, (current) => ({
            ...current,
            feeds: new Map(current.feeds).set(feed, { answer, updatedAt })
          }))
        }),
      setPaused: (symbol, paused) =>
        Ref.update(state, (current) => {
          const next = new Set(current.paused)
          if (paused) next.add(stock(symbol).address.toLowerCase())
          else next.delete(stock(symbol).address.toLowerCase())
          return { ...current, paused: next }
        }),
      transfers: Effect.map(Ref.get(state), (current) =>
        [...current.receipts.values()].flatMap((receipt) =>
          receipt.transfers.map((transfer) => ({ ...transfer, hash: receipt.hash }))
        )
      )
    })

    return Context.make(ChainClient, client)
      .pipe(Context.add(TokenRegistry, { chainId, tokens }))
      .pipe(Context.add(InMemoryChain, control))
  })
