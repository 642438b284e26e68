/**
 * An in-memory chain for tests and demos: a `ChainClient` and a `TokenRegistry` with no process
 * behind them. State lives in memory; signatures are checked for real (EOA signers only: a
 * contract wallet's signature is refused), block time is effect's `Clock` (so `TestClock` drives
 * it), and every transaction (a mint too) is "mined" at once, in a block of its own. The demo
 * exchange trades by the contract's own rules (Exchange.ts) from 10,000,000 USD1 of liquidity.
 * `InMemoryChain` itself is the control a test uses to mint tokens, set feed prices and pause tokens.
 *
 *     layer(testServer({ ports: { chain: InMemoryChain.layer() } }))(...)
 *
 * One unit because it is one `ChainClient` over one state: every operation reads and changes the
 * same balances, nonces and receipts, as a chain does; its pure rules are apart already
 * (Exchange.ts, the balance helpers above `make`).
 */
import { Clock, Context, Effect, Either, Layer, Option, Redacted, Ref } from "effect"
import {
  encodeAbiParameters,
  encodeFunctionData,
  erc20Abi,
  getAddress,
  type Hash,
  type Hex,
  hashTypedData,
  isAddressEqual,
  keccak256,
  parseUnits,
  toHex,
  zeroAddress
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import type { Address } from "./Address.js"
import {
  CallReverted,
  type ChainAccount,
  ChainClient,
  ChainError,
  type Permit,
  type Receipt,
  type RecordSigned,
  type SignedTransaction,
  type TokenTransfer,
  type TransferAuthorization,
  type Usd1Call,
  type Usd1Token
} from "./ChainClient.js"
import { DemoExchangeArtifact, Usd1Artifact } from "./contracts/artifacts.js"
import { DEVNET_EXCHANGE_USD1, DEVNET_STOCK_FIXTURES } from "./Devnet.js"
import { permitTypedData } from "./Eip2612.js"
import { transferWithAuthorizationTypedData } from "./Eip3009.js"
import { exchangeOutput } from "./Exchange.js"
import { recoverMessageSigner, recoverSigner } from "./Secp256k1.js"
import { sendQueues } from "./SendQueues.js"
import { type StockToken, TokenRegistry } from "./Tokens.js"

/** A deterministic address for a name, so that test fixtures are stable. */
const addressFor = (name: string): Address => getAddress(`0x${keccak256(toHex(`in-memory:${name}`)).slice(26)}`)

const FEED_DECIMALS = 8

/** What every transaction costs here: gas does not exist, a caller that asks gets a figure. */
const IN_MEMORY_GAS = 60_000n

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
  /** sender (lower case) -> transactions it sent */
  readonly nonces: ReadonlyMap<string, number>
  /** `${owner}:${spender}` (lower case) -> USD1 allowance */
  readonly allowances: ReadonlyMap<string, bigint>
  /** owner (lower case) -> its next EIP-2612 permit nonce */
  readonly permitNonces: ReadonlyMap<string, bigint>
  /** The USD1 `Approval`s mined, with their blocks */
  readonly approvals: ReadonlyArray<{
    readonly blockNumber: bigint
    readonly owner: Address
    readonly spender: Address
  }>
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

/**
 * The state after the transfers, in order, as the tokens would make them: a transfer from the zero
 * address mints; a paused token or a balance too small reverts (with the tokens' own errors).
 */
const moved = (state: State, transfers: ReadonlyArray<TokenTransfer>): Either.Either<State, string> => {
  let next = state
  for (const transfer of transfers) {
    if (next.paused.has(transfer.token.toLowerCase())) return Either.left("EnforcedPause")
    if (transfer.from !== zeroAddress) {
      const balance = balanceIn(next, transfer.token, transfer.from)
      if (balance < transfer.value) return Either.left("ERC20InsufficientBalance")
      next = withBalance(next, transfer.token, transfer.from, balance - transfer.value)
    }
    next = withBalance(next, transfer.token, transfer.to, balanceIn(next, transfer.token, transfer.to) + transfer.value)
  }
  return Either.right(next)
}

/**
 * `state` with a block of its own holding `transfers` (mints, from the zero address), as a faucet's
 * transaction would be: whoever follows the blocks' transfers (the card balance follower) sees them.
 */
const withMintBlock = (state: State, transfers: ReadonlyArray<TokenTransfer>): State => {
  const blockNumber = BigInt(state.receipts.size + 1)
  const hash = keccak256(toHex(`in-memory mint in block ${blockNumber}`))
  return {
    ...state,
    receipts: new Map(state.receipts).set(hash, {
      hash,
      status: "success",
      outOfGas: false,
      transfers,
      blockNumber,
      blockHash: hash
    })
  }
}

/**
 * What a transaction does when mined on `state` at `blockTime`: its transfers and any other change
 * (`andThen`), or its revert reason.
 */
type Execution = (
  state: State,
  blockTime: bigint
) => Either.Either<
  { readonly transfers: ReadonlyArray<TokenTransfer>; readonly andThen?: (state: State, hash: Hash) => State },
  string
>

/** The state after mining `execution` as transaction `hash`: its changes and a receipt, or a reverted receipt. */
const mine = (state: State, execution: Execution, hash: Hash, blockTime: bigint): State => {
  // one block per transaction, numbered from 1, its hash the transaction's
  const block = { blockNumber: BigInt(state.receipts.size + 1), blockHash: hash }
  const outcome = Either.flatMap(execution(state, blockTime), ({ transfers, andThen }) =>
    Either.map(moved(state, transfers), (after) => ({ transfers, after: andThen?.(after, hash) ?? after }))
  )
  return Either.match(outcome, {
    onLeft: () => ({
      ...state,
      receipts: new Map(state.receipts).set(hash, {
        hash,
        status: "reverted",
        outOfGas: false,
        transfers: [],
        ...block
      })
    }),
    onRight: ({ transfers, after }) => ({
      ...after,
      receipts: new Map(after.receipts).set(hash, { hash, status: "success", outOfGas: false, transfers, ...block })
    })
  })
}

export interface InMemoryChainOptions {
  readonly chainId?: number
  /** USD1's EIP-712 domain, as the real token's. */
  readonly usd1?: { readonly name?: string; readonly version?: string }
}

export interface InMemoryChainShape {
  readonly usd1: Usd1Token
  readonly tokens: ReadonlyArray<StockToken>
  /** The demo exchange's address (it holds the USD1 it pays for sold tokens). */
  readonly exchange: Address
  /** Creates tokens out of nothing (USD1 or a stock token), in a block of its own, even while the token is paused. */
  readonly mint: (token: Address, to: Address, amount: bigint) => Effect.Effect<void>
  /** A token's balance. */
  readonly balanceOf: (token: Address, owner: Address) => Effect.Effect<bigint>
  /** How many transactions `sender` has sent (its next nonce). */
  readonly transactionCount: (sender: Address) => Effect.Effect<number>
  /** Starts a new feed round for the stock `symbol` at `price` USD, stamped with the current block time. */
  readonly setPrice: (symbol: string, price: number) => Effect.Effect<void>
  readonly setPaused: (symbol: string, paused: boolean) => Effect.Effect<void>
  /** Every transfer mined so far (mints included), oldest first. */
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
    const exchange = addressFor("exchange")
    const now = Effect.map(Clock.currentTimeMillis, (ms) => BigInt(Math.floor(ms / 1000)))
    const startedAt = yield* now
    const empty: State = {
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
      nonces: new Map(),
      allowances: new Map(),
      permitNonces: new Map(),
      approvals: []
    }
    const state = yield* Ref.make<State>(withBalance(empty, usd1.address, exchange, DEVNET_EXCHANGE_USD1))

    const queueOf = sendQueues()

    /**
     * Sends a transaction from `sender`'s queue: judges it on the current state (a revert is
     * `CallReverted`, nothing sent), lets `record` persist it, then mines it (on the state of that
     * moment: should it fail by then, it is mined reverted, as on a chain).
     */
    const transact = <E, R>(
      sender: Address,
      to: Address,
      data: Hex,
      execution: Execution,
      record: RecordSigned<E, R>
    ) =>
      queueOf(sender).serially(
        Effect.gen(function* () {
          const blockTime = yield* now
          const current = yield* Ref.get(state)
          const refusal = Either.flatMap(execution(current, blockTime), ({ transfers }) => moved(current, transfers))
          if (Either.isLeft(refusal)) return yield* new CallReverted({ reason: refusal.left })
          const nonce = current.nonces.get(sender.toLowerCase()) ?? 0
          const raw = encodeAbiParameters(
            [{ type: "address" }, { type: "uint256" }, { type: "address" }, { type: "bytes" }],
            [sender, BigInt(nonce), to, data]
          )
          const signed: SignedTransaction = { sender, hash: keccak256(raw), raw, nonce }
          yield* record(signed, "write")
          yield* Ref.update(state, (latest) => ({
            ...mine(latest, execution, signed.hash, blockTime),
            nonces: new Map(latest.nonces).set(sender.toLowerCase(), nonce + 1)
          }))
          return signed
        })
      )

    const stock = (symbol: string) =>
      Option.fromNullable(tokens.find((token) => token.symbol === symbol.toUpperCase())).pipe(
        Option.getOrThrowWith(() => new Error(`unknown in-memory stock ${symbol}`))
      )

    const signedBy = async (address: Address, recover: () => Promise<Address>) => {
      const recovered = await recover().catch(() => undefined)
      return recovered !== undefined && isAddressEqual(recovered, address)
    }

    const authorizationSigned = (authorization: TransferAuthorization, signature: Hex) =>
      Effect.promise(() =>
        signedBy(authorization.from, () =>
          recoverSigner(hashTypedData(transferWithAuthorizationTypedData(authorization, { chainId, usd1 })), signature)
        )
      )

    /** The token's checks of a `transferWithAuthorization`, in its order, with its revert messages. */
    const transferExecution =
      (authorization: TransferAuthorization, signed: boolean): Execution =>
      (current, blockTime) => {
        const used = key(authorization.from, authorization.nonce)
        if (blockTime <= authorization.validAfter) return Either.left("USD1: authorization is not yet valid")
        if (blockTime >= authorization.validBefore) return Either.left("USD1: authorization is expired")
        if (current.authorizations.has(used)) return Either.left("USD1: authorization is used or canceled")
        if (!signed) return Either.left("USD1: invalid signature")
        return Either.right({
          transfers: [
            { token: usd1.address, from: authorization.from, to: authorization.to, value: authorization.value }
          ],
          andThen: (after, hash) => ({ ...after, authorizations: new Map(after.authorizations).set(used, hash) })
        })
      }

    const transferCheck = (authorization: TransferAuthorization, signature: Hex) =>
      Effect.gen(function* () {
        const execution = transferExecution(authorization, yield* authorizationSigned(authorization, signature))
        const [current, blockTime] = [yield* Ref.get(state), yield* now]
        const outcome = Either.flatMap(execution(current, blockTime), ({ transfers }) => moved(current, transfers))
        return {
          used: current.authorizations.has(key(authorization.from, authorization.nonce)),
          balance: balanceIn(current, usd1.address, authorization.from),
          refusal: Either.isLeft(outcome) ? Option.some(outcome.left) : Option.none()
        }
      })

    const transferWithAuthorization = <E, R>(
      authorization: TransferAuthorization,
      signature: Hex,
      record: RecordSigned<E, R>
    ) =>
      Effect.flatMap(authorizationSigned(authorization, signature), (signed) => {
        const a = authorization
        const data = encodeFunctionData({
          abi: Usd1Artifact.abi,
          functionName: "transferWithAuthorization",
          args: [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce, signature]
        })
        return transact(relayer, usd1.address, data, transferExecution(authorization, signed), record)
      })

    /** A trade on the demo exchange by `trader`, paid to `trader`, by the contract's rules. */
    const trade = <E, R>(
      trader: Address,
      side: "sell" | "buy",
      tokenAddress: Address,
      amountIn: bigint,
      minOut: bigint,
      record: RecordSigned<E, R>
    ) => {
      const token = getAddress(tokenAddress)
      const listed = tokens.find((t) => isAddressEqual(t.address, token))
      const execution: Execution = (current, blockTime) =>
        Either.map(
          exchangeOutput(
            { side, amountIn, minOut },
            {
              paused: current.paused.has(token.toLowerCase()),
              round: listed === undefined ? undefined : current.feeds.get(listed.feed.toLowerCase()),
              now: blockTime
            }
          ),
          (out) => ({
            transfers:
              side === "sell"
                ? [
                    { token, from: trader, to: exchange, value: amountIn },
                    { token: usd1.address, from: exchange, to: trader, value: out }
                  ]
                : [
                    { token: usd1.address, from: trader, to: exchange, value: amountIn },
                    { token, from: zeroAddress, to: trader, value: out }
                  ]
          })
        )
      const data = encodeFunctionData({
        abi: DemoExchangeArtifact.abi,
        functionName: side,
        args: [token, amountIn, minOut, trader]
      })
      return transact(trader, exchange, data, execution, record)
    }

    /** USD1's `permit`, by its rules: before the deadline, signed by the owner over its current nonce. */
    const permitExecution = (permit: Permit, signature: Hex) =>
      Effect.map(
        Effect.promise(() =>
          signedBy(permit.owner, () =>
            recoverSigner(hashTypedData(permitTypedData(permit, { chainId, usd1 })), signature)
          )
        ),
        (signed): Execution =>
          (current, blockTime) => {
            if (blockTime > permit.deadline) return Either.left("ERC2612ExpiredSignature")
            const nonce = current.permitNonces.get(permit.owner.toLowerCase()) ?? 0n
            if (!signed || nonce !== permit.nonce) return Either.left("ERC2612InvalidSigner")
            return Either.right({
              transfers: [],
              andThen: (after) => ({
                ...after,
                allowances: new Map(after.allowances).set(key(permit.owner, permit.spender), permit.value),
                permitNonces: new Map(after.permitNonces).set(permit.owner.toLowerCase(), nonce + 1n),
                approvals: [
                  ...after.approvals,
                  { blockNumber: BigInt(after.receipts.size + 1), owner: permit.owner, spender: permit.spender }
                ]
              })
            })
          }
      )

    /** A USD1 call of `sender` by the token's rules (`transferFrom` within the allowance it was given). */
    const usd1Execution = (sender: Address, call: Usd1Call): Effect.Effect<Execution> => {
      switch (call._tag) {
        case "Permit":
          return permitExecution(call.permit, call.signature)
        case "Transfer":
          return Effect.succeed(() =>
            Either.right({
              transfers: [{ token: usd1.address, from: sender, to: getAddress(call.to), value: call.amount }]
            })
          )
        case "TransferFrom":
          return Effect.succeed((current: State) => {
            const allowed = current.allowances.get(key(call.from, sender)) ?? 0n
            if (allowed < call.amount) return Either.left("ERC20InsufficientAllowance")
            return Either.right({
              transfers: [
                { token: usd1.address, from: getAddress(call.from), to: getAddress(call.to), value: call.amount }
              ],
              andThen: (after: State) => ({
                ...after,
                allowances: new Map(after.allowances).set(key(call.from, sender), allowed - call.amount)
              })
            })
          })
      }
    }

    /** Transactions signed for a caller that keeps their nonces (`ChainAccount.sign`), mined when broadcast in nonce order. */
    const signedApart = new Map<
      Hash,
      { readonly sender: Address; readonly nonce: number; readonly execution: Execution }
    >()

    /** A signed transaction broadcast: mined at once when its nonce is next, with any of its sender's that follow. */
    const broadcast = (raw: Hex) =>
      Effect.gen(function* () {
        const hash = keccak256(raw)
        const signed = signedApart.get(hash)
        const current = yield* Ref.get(state)
        if (signed === undefined || current.receipts.has(hash)) return "known" as const
        const next = current.nonces.get(signed.sender.toLowerCase()) ?? 0
        if (signed.nonce < next) return "replaced" as const
        const blockTime = yield* now
        yield* Ref.update(state, (latest) => {
          let mined = latest
          for (;;) {
            const at = mined.nonces.get(signed.sender.toLowerCase()) ?? 0
            const due = [...signedApart].find(([, tx]) => isAddressEqual(tx.sender, signed.sender) && tx.nonce === at)
            if (due === undefined) return mined
            signedApart.delete(due[0])
            mined = {
              ...mine(mined, due[1].execution, due[0], blockTime),
              nonces: new Map(mined.nonces).set(signed.sender.toLowerCase(), at + 1)
            }
          }
        })
        return "known" as const
      })

    const account = (privateKey: Redacted.Redacted<Hex>): ChainAccount => {
      const address = privateKeyToAccount(Redacted.value(privateKey)).address
      return {
        address,
        nonce: () => Effect.map(Ref.get(state), (current) => current.nonces.get(address.toLowerCase()) ?? 0),
        estimate: (call) =>
          Effect.gen(function* () {
            const execution = yield* usd1Execution(address, call)
            const current = yield* Ref.get(state)
            const refusal = Either.flatMap(execution(current, yield* now), ({ transfers }) => moved(current, transfers))
            if (Either.isLeft(refusal)) return yield* new CallReverted({ reason: refusal.left })
            return IN_MEMORY_GAS
          }),
        sign: (call, gas, nonce) =>
          Effect.map(usd1Execution(address, call), (execution) => {
            const raw = encodeAbiParameters(
              [{ type: "address" }, { type: "uint256" }, { type: "uint256" }, { type: "string" }],
              [
                address,
                BigInt(nonce),
                gas,
                JSON.stringify(call, (_, value) => (typeof value === "bigint" ? `${value}` : value))
              ]
            )
            const hash = keccak256(raw)
            signedApart.set(hash, { sender: address, nonce, execution })
            return { sender: address, hash, raw, nonce }
          }),
        // every transaction is mined when sent: none is ever stuck
        bump: () => Effect.succeedNone,
        sell: (token, amount, minUsd1Out, record) => trade(address, "sell", token, amount, minUsd1Out, record),
        buy: (token, usd1In, minTokensOut, record) => trade(address, "buy", token, usd1In, minTokensOut, record),
        transferUsd1: (to, amount, record) =>
          transact(
            address,
            usd1.address,
            encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [to, amount] }),
            () =>
              Either.right({ transfers: [{ token: usd1.address, from: address, to: getAddress(to), value: amount }] }),
            record
          )
      }
    }

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
      relayers: [relayer],
      // gas does not exist here
      relayerFunded: Effect.succeed(true),
      relayerPricedOut: Effect.succeed(false),
      verifyMessage: (address, message, signature) =>
        Effect.promise(() => signedBy(address, () => recoverMessageSigner(message, signature))),
      transferCheck,
      balanceOf: (token, owner) => Effect.map(Ref.get(state), (current) => balanceIn(current, token, owner)),
      balances: (owners, tokens) =>
        Effect.map(Ref.get(state), (current) =>
          owners.map((owner) => tokens.map((token) => balanceIn(current, token, owner)))
        ),
      usd1Parties: (fromBlock, toBlock) =>
        Effect.map(Ref.get(state), (current) => {
          const within = ({ blockNumber }: { readonly blockNumber: bigint }) =>
            blockNumber >= fromBlock && blockNumber <= toBlock
          return [
            ...new Set([
              ...[...current.receipts.values()]
                .filter(within)
                .flatMap(({ transfers }) =>
                  transfers.filter((transfer) => isAddressEqual(transfer.token, usd1.address))
                )
                .flatMap(({ from, to }) => [getAddress(from), getAddress(to)]),
              ...current.approvals.filter(within).flatMap(({ owner, spender }) => [owner, spender])
            ])
          ]
        }),
      usd1Positions: (owners, spender) =>
        Effect.map(Ref.get(state), (current) =>
          owners.map((owner) => ({
            usd1: balanceIn(current, usd1.address, owner),
            allowance: current.allowances.get(key(owner, spender)) ?? 0n
          }))
        ),
      permitNonce: (owner) =>
        Effect.map(Ref.get(state), (current) => current.permitNonces.get(owner.toLowerCase()) ?? 0n),
      authorizationState: (authorizer, nonce) =>
        Effect.map(Ref.get(state), (current) => current.authorizations.has(key(authorizer, nonce))),
      authorizationUsedIn: (authorizer, nonce) =>
        Effect.map(Ref.get(state), (current) =>
          Option.fromNullable(current.authorizations.get(key(authorizer, nonce)))
        ),
      authorizationSigned,
      usd1DomainSeparator: Effect.succeedNone,
      transferWithAuthorization,
      rebroadcast: broadcast,
      // every transaction is mined when sent: none is ever stuck
      replaceStuck: () => Effect.succeedNone,
      // every transaction is mined when sent: no nonce is ever missing
      followRelayerNonce: () =>
        Effect.map(Ref.get(state), (current) => {
          const next = current.nonces.get(relayer.toLowerCase()) ?? 0
          return [{ chainNext: next, next, resent: 0, filled: 0 }]
        }),
      // nothing is ever lost or queued here
      relayerNonceAlarm: Effect.never,
      relayerNonceTrouble: Effect.succeedNone,
      receipt: (hash) => Effect.map(Ref.get(state), (current) => Option.fromNullable(current.receipts.get(hash))),
      feedRound: (feed) =>
        Effect.map(feedOf(feed), ({ answer, updatedAt }) => ({ answer, decimals: FEED_DECIMALS, updatedAt })),
      tokenPaused: (token) => Effect.map(Ref.get(state), (current) => current.paused.has(token.toLowerCase())),
      feedStates: (tokens) =>
        Effect.forEach(tokens, ({ feed, token }) =>
          Effect.zipWith(feedOf(feed), Ref.get(state), ({ answer, updatedAt }, current) =>
            Either.right({
              round: { answer, decimals: FEED_DECIMALS, updatedAt },
              paused: current.paused.has(token.toLowerCase())
            })
          )
        ),
      blockTime: now,
      headBlock: Effect.map(Ref.get(state), (current) => BigInt(current.receipts.size)),
      watchedHead: Effect.zipWith(Ref.get(state), now, (current, time) => ({
        number: BigInt(current.receipts.size),
        time
      })),
      exchange: Option.some(exchange),
      account,
      endpoints: Effect.succeed([]),
      faucet: Option.some({
        // Mints like the devnet's faucet (a paused token refuses), in a block; gas does not exist here.
        fund: (to, grant) =>
          Effect.flatten(
            Ref.modify(state, (current) => {
              const mints = [{ token: usd1.address, amount: grant.usd1 }, ...grant.tokens]
                .filter(({ amount }) => amount > 0n)
                .map(({ token, amount }) => ({ token, from: zeroAddress, to, value: amount }))
              return Either.match(moved(current, mints), {
                onLeft: (reason): readonly [Effect.Effect<void, ChainError>, State] => [
                  Effect.fail(new ChainError({ message: `faucet: ${reason}` })),
                  current
                ],
                onRight: (funded): readonly [Effect.Effect<void, ChainError>, State] => [
                  Effect.void,
                  withMintBlock(funded, mints)
                ]
              })
            })
          )
      })
    })

    const control = InMemoryChain.of({
      usd1,
      tokens,
      exchange,
      mint: (token, to, amount) =>
        Ref.update(state, (current) =>
          withMintBlock(withBalance(current, token, to, balanceIn(current, token, to) + amount), [
            { token, from: zeroAddress, to, value: amount }
          ])
        ),
      balanceOf: (token, owner) => Effect.map(Ref.get(state), (current) => balanceIn(current, token, owner)),
      transactionCount: (sender) =>
        Effect.map(Ref.get(state), (current) => current.nonces.get(sender.toLowerCase()) ?? 0),
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
