/**
 * The chain port's bulk balances, own accounts (sell, buy, transferUsd1) and faucet: one set of
 * behaviours, run against the real devnet (EvmChain over anvil) and against InMemoryChain, then
 * what only the devnet has (gas, approvals, Multicall3, a configured chain without a faucet).
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Context, Data, Effect, Layer, Option, Redacted, Ref } from "effect"
import { createPublicClient, erc20Abi, getAddress, http, maxUint256, parseEther, parseUnits, toHex } from "viem"
import { generatePrivateKey } from "viem/accounts"
import type { Address } from "../../src/chain/Address.js"
import {
  CallReverted,
  ChainClient,
  ChainError,
  type SignedPurpose,
  type SignedTransaction
} from "../../src/chain/ChainClient.js"
import { MulticallArtifact } from "../../src/chain/contracts/artifacts.js"
import { ChainDeployment } from "../../src/chain/Deployment.js"
import { setStockPaused } from "../../src/chain/DevnetOperator.js"
import { EvmChain } from "../../src/chain/EvmChain.js"
import { ExchangeRevert } from "../../src/chain/Exchange.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { MULTICALL3_ADDRESS } from "../../src/chain/Multicall.js"
import { TokenRegistry } from "../../src/chain/Tokens.js"
import { TestChain, TestDevnet, TestDevnetDeployment } from "../support/TestChain.js"

const units = (amount: string) => parseUnits(amount, 18)

/** What a behaviour needs beyond the port: the account's next nonce, and the operator's pause switch. */
class Harness extends Context.Tag("test/ChainHarness")<
  Harness,
  {
    /** Transactions sent by `address`, broadcast ones included. */
    readonly nonceOf: (address: Address) => Effect.Effect<number>
    readonly setPaused: (symbol: string, paused: boolean) => Effect.Effect<void>
  }
>() {}

const DevnetHarness = Layer.effect(
  Harness,
  Effect.map(TestDevnet, (devnet) => {
    const client = createPublicClient({ transport: http(devnet.rpcUrl) })
    return {
      nonceOf: (address) => Effect.promise(() => client.getTransactionCount({ address, blockTag: "pending" })),
      setPaused: (symbol, paused) => setStockPaused(devnet, symbol, paused).pipe(Effect.orDie, Effect.asVoid)
    }
  })
)

const InMemoryHarness = Layer.effect(
  Harness,
  Effect.map(InMemoryChain, (chain) => ({ nonceOf: chain.transactionCount, setPaused: chain.setPaused }))
)

class RecordFailed extends Data.TaggedError("RecordFailed") {}

const noRecord = () => Effect.void

const stock = (symbol: string) =>
  Effect.map(TokenRegistry, (registry) => registry.tokens.find((token) => token.symbol === symbol)!)

/** A new account with `usd1` USD1 and the given stock holdings, from the chain's faucet. */
const fundedAccount = (usd1: string, holdings: ReadonlyArray<readonly [symbol: string, amount: string]> = []) =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const account = chain.account(Redacted.make(generatePrivateKey()))
    const tokens = yield* Effect.forEach(holdings, ([symbol, amount]) =>
      Effect.map(stock(symbol), (token) => ({ token: token.address, amount: units(amount) }))
    )
    yield* Option.getOrThrow(chain.faucet).fund(account.address, { usd1: units(usd1), tokens })
    return account
  })

const randomAddress = (): Address => getAddress(toHex(randomBytes(20)))

/** A `record` that checks it runs before the broadcast (the nonce is not used yet) and keeps what it saw. */
const recordingBeforeBroadcast = (sender: Address) =>
  Effect.gen(function* () {
    const harness = yield* Harness
    const seen = yield* Ref.make<
      ReadonlyArray<{ readonly signed: SignedTransaction; readonly purpose: SignedPurpose }>
    >([])
    const record = (signed: SignedTransaction, purpose: SignedPurpose) =>
      Effect.gen(function* () {
        expect(yield* harness.nonceOf(sender)).toBe(signed.nonce)
        yield* Ref.update(seen, (all) => [...all, { signed, purpose }])
      })
    return { record, seen: Ref.get(seen) }
  })

const behaviours = (name: string, chainLayer: Layer.Layer<ChainClient | TokenRegistry | Harness>) =>
  layer(chainLayer, { excludeTestServices: true, timeout: "120 seconds" })(name, (it) => {
    it.effect("balances reads every owner's balance of every token, as balanceOf does", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const registry = yield* TokenRegistry
        const a = yield* fundedAccount("12.5", [["NVDA", "3"]])
        const b = yield* fundedAccount("0", [
          ["TSLA", "0.25"],
          ["SPY", "7"]
        ])
        const nobody = randomAddress()
        const tokens = [chain.usd1.address, ...registry.tokens.map((token) => token.address)]
        const owners = [a.address, nobody, b.address]
        const matrix = yield* chain.balances(owners, tokens)
        const one = yield* Effect.forEach(owners, (owner) =>
          Effect.forEach(tokens, (token) => chain.balanceOf(token, owner))
        )
        expect(matrix).toEqual(one)
        expect(matrix).toEqual([
          [units("12.5"), units("3"), 0n, 0n, 0n, 0n],
          [0n, 0n, 0n, 0n, 0n, 0n],
          [0n, 0n, units("0.25"), 0n, 0n, units("7")]
        ])
        expect(yield* chain.balances([], tokens)).toEqual([])
        expect(yield* chain.balances(owners, [])).toEqual([[], [], []])
      })
    )

    it.effect("balances of 1,000 owners × 6 tokens comes back whole and in order", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const registry = yield* TokenRegistry
        const owners = Array.from({ length: 1_000 }, randomAddress)
        const funded = [0, 83, 84, 499, 500, 999]
        for (const [n, i] of funded.entries()) {
          yield* Option.getOrThrow(chain.faucet).fund(owners[i]!, {
            usd1: BigInt(i + 1),
            tokens: [{ token: registry.tokens[n % 5]!.address, amount: BigInt(1_000 + i) }]
          })
        }
        const tokens = [chain.usd1.address, ...registry.tokens.map((token) => token.address)]
        const matrix = yield* chain.balances(owners, tokens)
        const expected = owners.map((_, i) => {
          const n = funded.indexOf(i)
          return tokens.map((_, j) =>
            n < 0 ? 0n : j === 0 ? BigInt(i + 1) : j === (n % 5) + 1 ? BigInt(1_000 + i) : 0n
          )
        })
        expect(matrix).toEqual(expected)
      })
    )

    it.effect(
      "sell: the tokens go to the exchange and USD1 comes back at the feed price, recorded before broadcast",
      () =>
        Effect.gen(function* () {
          const chain = yield* ChainClient
          const harness = yield* Harness
          const nvda = yield* stock("NVDA")
          const exchange = Option.getOrThrow(chain.exchange)
          const account = yield* fundedAccount("0", [["NVDA", "5"]])
          const { record, seen } = yield* recordingBeforeBroadcast(account.address)
          // 2 NVDA at $181.00
          const signed = yield* account.sell(nvda.address, units("2"), units("362"), record)
          // (On the devnet the exchange's approval is recorded before it: the test of approvals below.)
          const writes = (yield* seen).filter(({ purpose }) => purpose === "write")
          expect(writes).toEqual([{ signed, purpose: "write" }])
          const receipt = Option.getOrThrow(yield* chain.receipt(signed.hash, 10_000))
          expect(receipt).toEqual({
            hash: signed.hash,
            status: "success",
            outOfGas: false,
            transfers: [
              { token: nvda.address, from: account.address, to: exchange, value: units("2") },
              { token: chain.usd1.address, from: exchange, to: account.address, value: units("362") }
            ],
            // Where it was mined, which a finality check compares with the canonical chain later.
            blockNumber: expect.any(BigInt),
            blockHash: expect.stringMatching(/^0x[0-9a-f]{64}$/)
          })
          expect(receipt.blockNumber).toBeGreaterThan(0n)
          expect(yield* chain.balances([account.address], [nvda.address, chain.usd1.address])).toEqual([
            [units("3"), units("362")]
          ])
          expect(yield* harness.nonceOf(account.address)).toBe(signed.nonce + 1)
        })
    )

    it.effect("buy: USD1 goes to the exchange and the tokens come back at the feed price", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const tsla = yield* stock("TSLA")
        const exchange = Option.getOrThrow(chain.exchange)
        const account = yield* fundedAccount("1000")
        // $805 at $402.50 = 2 TSLA
        const signed = yield* account.buy(tsla.address, units("805"), units("2"), noRecord)
        const receipt = Option.getOrThrow(yield* chain.receipt(signed.hash, 10_000))
        expect(receipt.status).toBe("success")
        expect(receipt.transfers).toEqual([
          { token: chain.usd1.address, from: account.address, to: exchange, value: units("805") },
          {
            token: tsla.address,
            from: "0x0000000000000000000000000000000000000000",
            to: account.address,
            value: units("2")
          }
        ])
        expect(yield* chain.balances([account.address], [tsla.address, chain.usd1.address])).toEqual([
          [units("2"), units("195")]
        ])
      })
    )

    it.effect("transferUsd1 moves USD1 to the recipient; more than the balance is refused", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const harness = yield* Harness
        const account = yield* fundedAccount("30")
        const to = randomAddress()
        const signed = yield* account.transferUsd1(to, units("12.75"), noRecord)
        expect(Option.getOrThrow(yield* chain.receipt(signed.hash, 10_000)).transfers).toEqual([
          { token: chain.usd1.address, from: account.address, to, value: units("12.75") }
        ])
        expect(yield* chain.balances([account.address, to], [chain.usd1.address])).toEqual([
          [units("17.25")],
          [units("12.75")]
        ])
        const nonce = yield* harness.nonceOf(account.address)
        const refused = yield* Effect.flip(account.transferUsd1(to, units("17.26"), noRecord))
        expect(refused).toEqual(new CallReverted({ reason: "ERC20InsufficientBalance" }))
        expect(yield* harness.nonceOf(account.address)).toBe(nonce)
      })
    )

    it.effect("a trade below its minimum output is refused before anything is sent, even the approval", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const harness = yield* Harness
        const aapl = yield* stock("AAPL")
        const account = yield* fundedAccount("500", [["AAPL", "1"]])
        const recorded = yield* Ref.make(0)
        const record = () => Ref.update(recorded, (n) => n + 1)
        // 1 AAPL is $229.30
        const sell = yield* Effect.flip(account.sell(aapl.address, units("1"), units("229.31"), record))
        expect(sell).toEqual(new CallReverted({ reason: ExchangeRevert.belowMinimum }))
        // $229.30 buys exactly 1 AAPL
        const buy = yield* Effect.flip(account.buy(aapl.address, units("229.3"), units("1") + 1n, record))
        expect(buy).toEqual(new CallReverted({ reason: ExchangeRevert.belowMinimum }))
        expect(yield* Ref.get(recorded)).toBe(0)
        expect(yield* harness.nonceOf(account.address)).toBe(0)
        expect(yield* chain.balances([account.address], [aapl.address, chain.usd1.address])).toEqual([
          [units("1"), units("500")]
        ])
      })
    )

    it.effect("a failing record stops the broadcast: nothing is sent, nothing moves", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const harness = yield* Harness
        const msft = yield* stock("MSFT")
        const account = yield* fundedAccount("100", [["MSFT", "2"]])
        // a first sale and a first purchase approve the exchange where the chain needs it
        yield* account.sell(msft.address, units("1"), 0n, noRecord)
        yield* account.buy(msft.address, units("10"), 0n, noRecord)
        const nonce = yield* harness.nonceOf(account.address)
        const before = yield* chain.balances([account.address], [msft.address, chain.usd1.address])
        const signed = yield* Ref.make(Option.none<SignedTransaction>())
        const failing = (tx: SignedTransaction) => Effect.zipRight(Ref.set(signed, Option.some(tx)), new RecordFailed())
        for (const attempt of [
          account.sell(msft.address, units("1"), 0n, failing),
          account.buy(msft.address, units("10"), 0n, failing),
          account.transferUsd1(randomAddress(), units("1"), failing)
        ]) {
          expect(yield* Effect.flip(attempt)).toEqual(new RecordFailed())
          const tx = Option.getOrThrow(yield* Ref.get(signed))
          expect(tx.nonce).toBe(nonce)
          expect(yield* chain.receipt(tx.hash, 200)).toEqual(Option.none())
        }
        expect(yield* harness.nonceOf(account.address)).toBe(nonce)
        expect(yield* chain.balances([account.address], [msft.address, chain.usd1.address])).toEqual(before)
      })
    )

    it.effect("a paused token can be neither sold nor bought, nor minted by the faucet", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const harness = yield* Harness
        const spy = yield* stock("SPY")
        const account = yield* fundedAccount("1000", [["SPY", "1"]])
        yield* harness.setPaused("SPY", true)
        const refusals = yield* Effect.all([
          Effect.flip(account.sell(spy.address, units("1"), 0n, noRecord)),
          Effect.flip(account.buy(spy.address, units("100"), 0n, noRecord)),
          Effect.flip(
            Option.getOrThrow(chain.faucet).fund(account.address, {
              usd1: units("1"),
              tokens: [{ token: spy.address, amount: units("1") }]
            })
          )
        ]).pipe(Effect.ensuring(harness.setPaused("SPY", false)))
        expect(refusals.slice(0, 2)).toEqual([
          new CallReverted({ reason: ExchangeRevert.paused }),
          new CallReverted({ reason: ExchangeRevert.paused })
        ])
        expect(refusals[2]).toBeInstanceOf(ChainError)
        expect(refusals[2]!.message).toContain("EnforcedPause")
        // the faucet gave nothing, not even the USD1 of the refused grant
        expect(yield* chain.balances([account.address], [spy.address, chain.usd1.address])).toEqual([
          [units("1"), units("1000")]
        ])
        // trading resumes with the token
        yield* account.sell(spy.address, units("1"), 0n, noRecord)
      })
    )

    it.effect("sends from one account go out one after another, each with the next nonce", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const account = yield* fundedAccount("10")
        const to = randomAddress()
        const sent = yield* Effect.all(
          Array.from({ length: 5 }, () => account.transferUsd1(to, units("1"), noRecord)),
          { concurrency: "unbounded" }
        )
        expect(sent.map((tx) => tx.nonce).sort()).toEqual([0, 1, 2, 3, 4])
        yield* Effect.forEach(sent, (tx) => chain.receipt(tx.hash, 10_000))
        expect(yield* chain.balanceOf(chain.usd1.address, to)).toBe(units("5"))
      })
    )
  })

behaviours("ChainClient accounts on the devnet (EvmChain)", DevnetHarness.pipe(Layer.provideMerge(TestChain)))
behaviours(
  "ChainClient accounts in memory (InMemoryChain)",
  InMemoryHarness.pipe(Layer.provideMerge(InMemoryChain.layer()))
)

// ---------------------------------------------------------------------------------------------------
// devnet only

layer(DevnetHarness.pipe(Layer.provideMerge(TestChain)), { excludeTestServices: true, timeout: "60 seconds" })(
  "EvmChain on the devnet only",
  (it) => {
    it.effect("our Multicall's runtime code is at the canonical Multicall3 address", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const code = yield* Effect.promise(() =>
          createPublicClient({ transport: http(devnet.rpcUrl) }).getCode({ address: MULTICALL3_ADDRESS })
        )
        expect(code).toBe(MulticallArtifact.deployedBytecode)
      })
    )

    it.effect("balances fails with a ChainError when a read fails", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        // an address without code answers balanceOf with nothing
        const error = yield* Effect.flip(chain.balances([randomAddress()], [chain.usd1.address, randomAddress()]))
        expect(error).toBeInstanceOf(ChainError)
        expect(error.message).toMatch(/^balances \(multicall\): /)
      })
    )

    it.effect("the faucet gives 1 ETH of gas with the tokens", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const account = yield* fundedAccount("5", [["NVDA", "1"]])
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        expect(yield* Effect.promise(() => client.getBalance({ address: account.address }))).toBe(parseEther("1"))
      })
    )

    it.effect("the exchange is approved once, for good, by the first trade that needs it", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const devnet = yield* TestDevnet
        const nvda = yield* stock("NVDA")
        const exchange = Option.getOrThrow(chain.exchange)
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const allowance = (token: Address, owner: Address) =>
          Effect.promise(() =>
            client.readContract({ address: token, abi: erc20Abi, functionName: "allowance", args: [owner, exchange] })
          )
        const account = yield* fundedAccount("100", [["NVDA", "2"]])
        const { record, seen } = yield* recordingBeforeBroadcast(account.address)
        const first = yield* account.sell(nvda.address, units("1"), 0n, record)
        // nonce 0 was the approval, recorded (before its broadcast) as one
        expect(first.nonce).toBe(1)
        expect(yield* seen).toEqual([
          { signed: expect.objectContaining({ sender: account.address, nonce: 0 }), purpose: "approval" },
          { signed: first, purpose: "write" }
        ])
        expect(yield* allowance(nvda.address, account.address)).toBe(maxUint256)
        const second = yield* account.sell(nvda.address, units("1"), 0n, record)
        expect(second.nonce).toBe(2)
        expect((yield* seen).slice(2)).toEqual([{ signed: second, purpose: "write" }])
        // buying spends USD1: its own approval
        expect(yield* allowance(chain.usd1.address, account.address)).toBe(0n)
        const bought = yield* account.buy(nvda.address, units("18.1"), units("0.1"), noRecord)
        expect(bought.nonce).toBe(4)
        expect(yield* allowance(chain.usd1.address, account.address)).toBe(maxUint256)
      })
    )
  }
)

/** The devnet's deployment, as if configured (`CHAIN_RPC_URL`): not the embedded devnet. */
const ConfiguredDeployment = Layer.effect(
  ChainDeployment,
  Effect.map(ChainDeployment, (deployment) => ({ ...deployment, local: false }))
).pipe(Layer.provide(TestDevnetDeployment))

layer(EvmChain.pipe(Layer.provide(ConfiguredDeployment)), { excludeTestServices: true, timeout: "60 seconds" })(
  "EvmChain on a configured chain",
  (it) => {
    it.effect("has no faucet, and still reads balances in bulk", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        expect(Option.isNone(chain.faucet)).toBe(true)
        expect(yield* chain.balances([randomAddress()], [chain.usd1.address])).toEqual([[0n]])
      })
    )
  }
)
