import { mkdtemp, readFile, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import * as path from "node:path"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Exit, Layer, Option } from "effect"
import {
  type Address,
  BaseError,
  ContractFunctionRevertedError,
  createPublicClient,
  createTestClient,
  createWalletClient,
  domainSeparator,
  erc20Abi,
  type Hash,
  type Hex,
  http,
  parseEther,
  parseEventLogs,
  parseSignature,
  parseUnits,
  toHex,
  zeroAddress
} from "viem"
import { generatePrivateKey, mnemonicToAccount, privateKeyToAccount } from "viem/accounts"
import {
  DemoExchangeArtifact,
  MulticallArtifact,
  PriceFeedArtifact,
  StockTokenArtifact,
  Usd1Artifact
} from "../../src/chain/contracts/artifacts.js"
import { awaitReceipt, type Devnet, DevnetError, devnetChain, startDevnet } from "../../src/chain/Devnet.js"
import {
  mintStock,
  mintUsd1,
  setStockPaused,
  setStockPrice,
  smartAccountAddress
} from "../../src/chain/DevnetOperator.js"
import { MULTICALL3_ADDRESS } from "../../src/chain/Multicall.js"
import type { EmbeddedServerError } from "../../src/embedded/EmbeddedServer.js"
import { TestDevnet } from "../support/TestChain.js"

// ---------------------------------------------------------------------------------------------------
// helpers

const usd1 = (amount: string) => parseUnits(amount, 18)
const shares = (amount: string) => parseUnits(amount, 18)

const clientsFor = (devnet: Devnet) => {
  const chain = devnetChain(devnet)
  const client = createPublicClient({ chain, transport: http(devnet.rpcUrl), pollingInterval: 20 })
  const wallet = (key: Hex) =>
    createWalletClient({
      account: privateKeyToAccount(key),
      chain,
      transport: http(devnet.rpcUrl, { retryCount: 0 }),
      pollingInterval: 20
    })
  /** Anvil's own methods: balances, time and code set by hand. */
  const anvil = createTestClient({ mode: "anvil", chain, transport: http(devnet.rpcUrl) })
  return { client, wallet, anvil }
}

/** The receipt of a transaction the test sent. */
const mined = (devnet: Devnet, hash: Hash) => awaitReceipt(devnet, hash, "the test's transaction").pipe(Effect.orDie)

/** `seconds` pass on chain, seen by the next block (mined at once). */
const passTime = (devnet: Devnet, seconds: number) =>
  Effect.gen(function* () {
    const { anvil } = clientsFor(devnet)
    yield* Effect.promise(() => anvil.increaseTime({ seconds }))
    yield* Effect.promise(() => anvil.mine({ blocks: 1 }))
  })

/** `owner` lets the exchange take `amount` of `token` (an ERC-20: USD1 or a stock token), mined. */
const approveExchange = (
  devnet: Devnet,
  owner: ReturnType<ReturnType<typeof clientsFor>["wallet"]>,
  token: Address,
  amount: bigint
) =>
  Effect.promise(() =>
    owner.writeContract({ address: token, abi: erc20Abi, functionName: "approve", args: [devnet.exchange, amount] })
  ).pipe(Effect.flatMap((hash) => mined(devnet, hash)))

const key = (devnet: Devnet, index: number): Hex => devnet.accountKeys[index]!
const addressOf = (privateKey: Hex): Address => privateKeyToAccount(privateKey).address
const stock = (devnet: Devnet, symbol: string) => devnet.stocks.find((s) => s.symbol === symbol)!

/** Runs `f`, which must reject with a contract revert; returns the revert reason or custom error name. */
const revertOf = (f: () => Promise<unknown>) =>
  Effect.promise(async () => {
    try {
      await f()
    } catch (error) {
      const reverted = error instanceof BaseError ? error.walk((e) => e instanceof ContractFunctionRevertedError) : null
      if (reverted instanceof ContractFunctionRevertedError) {
        return reverted.reason ?? reverted.data?.errorName ?? "(no reason)"
      }
      throw error
    }
    throw new Error("expected a revert, but the call succeeded")
  })

const balanceOf = (devnet: Devnet, token: Address, owner: Address) =>
  Effect.promise(() =>
    clientsFor(devnet).client.readContract({
      address: token,
      abi: Usd1Artifact.abi,
      functionName: "balanceOf",
      args: [owner]
    })
  )

const nowSeconds = () => BigInt(Math.floor(Date.now() / 1000))
const randomNonce = () => toHex(crypto.getRandomValues(new Uint8Array(32)))

const authorizationTypes = {
  TransferWithAuthorization: [
    { name: "from", type: "address" },
    { name: "to", type: "address" },
    { name: "value", type: "uint256" },
    { name: "validAfter", type: "uint256" },
    { name: "validBefore", type: "uint256" },
    { name: "nonce", type: "bytes32" }
  ]
} as const

const signTransferAuthorization = (
  devnet: Devnet,
  payerKey: Hex,
  message: { to: Address; value: bigint; validAfter: bigint; validBefore: bigint; nonce: Hex }
) =>
  Effect.promise(async () => {
    const payer = privateKeyToAccount(payerKey)
    const full = { from: payer.address, ...message }
    const signature = await payer.signTypedData({
      domain: {
        name: "World Liberty Financial USD",
        version: "1",
        chainId: devnet.chainId,
        verifyingContract: devnet.usd1
      },
      types: authorizationTypes,
      primaryType: "TransferWithAuthorization",
      message: full
    })
    return { message: full, signature }
  })

// ---------------------------------------------------------------------------------------------------
// one fresh devnet shared by the tests below (each test uses its own stock / accounts)

layer(Layer.scoped(TestDevnet, startDevnet()), { excludeTestServices: true, timeout: "60 seconds" })(
  "fresh devnet",
  (it) => {
    it.effect("runs anvil on chain 31337 with the ten standard dev accounts", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client } = clientsFor(devnet)
        expect(devnet.chainId).toBe(31337)
        expect(yield* Effect.promise(() => client.getChainId())).toBe(31337)
        expect(devnet.rpcUrl).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/)
        const nodeAccounts = yield* Effect.promise(() =>
          createWalletClient({ chain: devnetChain(devnet), transport: http(devnet.rpcUrl) }).getAddresses()
        )
        const mnemonic = "test test test test test test test test test test test junk"
        const expected = Array.from({ length: 10 }, (_, i) => mnemonicToAccount(mnemonic, { addressIndex: i }).address)
        expect(devnet.accountKeys.map(addressOf)).toEqual(expected)
        expect(nodeAccounts.map((a) => a.toLowerCase())).toEqual(expected.map((a) => a.toLowerCase()))
        expect(devnet.deployerKey).toBe(devnet.accountKeys[0])
      })
    )

    it.effect("USD1 has the WLFI name, symbol, 18 decimals and EIP-712 domain", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client } = clientsFor(devnet)
        const read = <F extends "name" | "symbol" | "decimals" | "eip712Domain" | "DOMAIN_SEPARATOR">(
          functionName: F
        ) => Effect.promise(() => client.readContract({ address: devnet.usd1, abi: Usd1Artifact.abi, functionName }))
        expect(yield* read("name")).toBe("World Liberty Financial USD")
        expect(yield* read("symbol")).toBe("USD1")
        expect(yield* read("decimals")).toBe(18)
        const [fields, name, version, chainId, verifyingContract, salt, extensions] = yield* read("eip712Domain")
        expect({ fields, name, version, chainId, verifyingContract, salt, extensions }).toEqual({
          fields: "0x0f",
          name: "World Liberty Financial USD",
          version: "1",
          chainId: 31337n,
          verifyingContract: devnet.usd1,
          salt: `0x${"00".repeat(32)}`,
          extensions: []
        })
        expect(yield* read("DOMAIN_SEPARATOR")).toBe(
          domainSeparator({
            domain: {
              name: "World Liberty Financial USD",
              version: "1",
              chainId: 31337,
              verifyingContract: devnet.usd1
            }
          })
        )
      })
    )

    it.effect("funds each dev account with 10,000 USD1 and the exchange with 10,000,000", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client } = clientsFor(devnet)
        const accounts = devnet.accountKeys.map(addressOf)
        // the setup mints, in order (later tests mint more to other addresses)
        const mints = yield* Effect.promise(() =>
          client.getContractEvents({
            address: devnet.usd1,
            abi: Usd1Artifact.abi,
            eventName: "Transfer",
            args: { from: zeroAddress },
            fromBlock: 0n,
            toBlock: "latest"
          })
        )
        expect(mints.slice(0, 11).map((e) => [e.args.to, e.args.value])).toEqual([
          [devnet.exchange, usd1("10000000")],
          ...accounts.map((a) => [a, usd1("10000")])
        ])
        // no test in this file moves USD1 of the dev accounts
        const balances = yield* Effect.promise(() =>
          Promise.all(
            accounts.map((owner) =>
              client.readContract({
                address: devnet.usd1,
                abi: Usd1Artifact.abi,
                functionName: "balanceOf",
                args: [owner]
              })
            )
          )
        )
        expect(balances).toEqual(Array(10).fill(usd1("10000")))
      })
    )

    it.effect(
      "deploys the five stocks, each with an 8-decimal feed at its fixture price, registered on the exchange, which mints them",
      () =>
        Effect.gen(function* () {
          const devnet = yield* TestDevnet
          const { client } = clientsFor(devnet)
          expect(devnet.stocks.map((s) => [s.symbol, s.ticker, s.name, s.initialPrice, s.decimals])).toEqual([
            ["NVDA", "NVDA", "NVIDIA", 181.0, 18],
            ["TSLA", "TSLA", "Tesla", 402.5, 18],
            ["AAPL", "AAPL", "Apple", 229.3, 18],
            ["MSFT", "MSFT", "Microsoft", 447.8, 18],
            ["SPY", "SPY", "SPDR S&P 500 ETF", 665.4, 18]
          ])
          const expectedAnswers = [18_100_000_000n, 40_250_000_000n, 22_930_000_000n, 44_780_000_000n, 66_540_000_000n]
          for (const [i, s] of devnet.stocks.entries()) {
            const [name, symbol, decimals, paused] = yield* Effect.promise(() =>
              Promise.all([
                client.readContract({ address: s.address, abi: StockTokenArtifact.abi, functionName: "name" }),
                client.readContract({ address: s.address, abi: StockTokenArtifact.abi, functionName: "symbol" }),
                client.readContract({ address: s.address, abi: StockTokenArtifact.abi, functionName: "decimals" }),
                client.readContract({ address: s.address, abi: StockTokenArtifact.abi, functionName: "paused" })
              ])
            )
            expect({ name, symbol, decimals, paused }).toEqual({
              name: s.name,
              symbol: s.symbol,
              decimals: 18,
              paused: false
            })
            const [feedDecimals, description, firstRound, registered] = yield* Effect.promise(() =>
              Promise.all([
                client.readContract({ address: s.feed, abi: PriceFeedArtifact.abi, functionName: "decimals" }),
                client.readContract({ address: s.feed, abi: PriceFeedArtifact.abi, functionName: "description" }),
                // round 1 is the deployment price, whatever other tests set later
                client.readContract({
                  address: s.feed,
                  abi: PriceFeedArtifact.abi,
                  functionName: "getRoundData",
                  args: [1n]
                }),
                client.readContract({
                  address: devnet.exchange,
                  abi: DemoExchangeArtifact.abi,
                  functionName: "feedOf",
                  args: [s.address]
                })
              ])
            )
            expect(feedDecimals).toBe(8)
            expect(
              yield* Effect.promise(() =>
                client.readContract({
                  address: s.address,
                  abi: StockTokenArtifact.abi,
                  functionName: "isMinter",
                  args: [devnet.exchange]
                })
              )
            ).toBe(true)
            expect(description).toBe(`${s.symbol} / USD`)
            expect(firstRound[0]).toBe(1n)
            expect(firstRound[1]).toBe(expectedAnswers[i])
            expect(firstRound[4]).toBe(1n)
            expect(registered).toBe(s.feed)
          }
        })
    )

    it.effect("setStockPrice starts a new feed round", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client } = clientsFor(devnet)
        const msft = stock(devnet, "MSFT")
        const latest = () =>
          Effect.promise(() =>
            client.readContract({ address: msft.feed, abi: PriceFeedArtifact.abi, functionName: "latestRoundData" })
          )
        const [roundBefore, answerBefore] = yield* latest()
        expect(answerBefore).toBe(44_780_000_000n)
        yield* setStockPrice(devnet, "MSFT", 450.12345678)
        const [roundId, answer, startedAt, updatedAt, answeredInRound] = yield* latest()
        const block = yield* Effect.promise(() => client.getBlock())
        expect(roundId).toBe(roundBefore + 1n)
        expect(answer).toBe(45_012_345_678n)
        expect(answeredInRound).toBe(roundId)
        expect(updatedAt).toBe(block.timestamp)
        expect(startedAt).toBe(updatedAt)
        // the exchange quotes the new price: 2 MSFT -> 900.24691356 USD1
        const quote = yield* Effect.promise(() =>
          client.readContract({
            address: devnet.exchange,
            abi: DemoExchangeArtifact.abi,
            functionName: "quote",
            args: [msft.address, shares("2")]
          })
        )
        expect(quote).toBe(usd1("900.24691356"))
        const unknown = yield* Effect.flip(setStockPrice(devnet, "XXXX", 1))
        expect(unknown).toBeInstanceOf(DevnetError)
        expect(unknown.message).toBe("unknown devnet stock XXXX")
      })
    )

    it.effect("setStockPaused halts transfers of the token, and unpausing resumes them", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet } = clientsFor(devnet)
        const tsla = stock(devnet, "TSLA")
        const holder = key(devnet, 1)
        const to = addressOf(key(devnet, 2))
        yield* mintStock(devnet, "TSLA", addressOf(holder), shares("3"))
        expect(yield* balanceOf(devnet, tsla.address, addressOf(holder))).toBe(shares("3"))

        const paused = yield* setStockPaused(devnet, "TSLA", true)
        expect(Option.isSome(paused)).toBe(true)
        expect(
          yield* Effect.promise(() =>
            client.readContract({ address: tsla.address, abi: StockTokenArtifact.abi, functionName: "paused" })
          )
        ).toBe(true)
        // already paused: no transaction
        expect(Option.isNone(yield* setStockPaused(devnet, "TSLA", true))).toBe(true)

        const transfer = { address: tsla.address, abi: StockTokenArtifact.abi, functionName: "transfer" } as const
        expect(
          yield* revertOf(() =>
            client.simulateContract({ ...transfer, args: [to, shares("1")], account: addressOf(holder) })
          )
        ).toBe("EnforcedPause")
        // also on chain: the transaction is mined and reverts
        const hash = yield* Effect.promise(() =>
          wallet(holder).writeContract({ ...transfer, args: [to, shares("1")], gas: 100_000n })
        )
        const receipt = yield* mined(devnet, hash)
        expect(receipt.status).toBe("reverted")
        expect(yield* balanceOf(devnet, tsla.address, to)).toBe(0n)

        yield* setStockPaused(devnet, "TSLA", false)
        const ok = yield* Effect.promise(() => wallet(holder).writeContract({ ...transfer, args: [to, shares("1")] }))
        expect((yield* mined(devnet, ok)).status).toBe("success")
        expect(yield* balanceOf(devnet, tsla.address, to)).toBe(shares("1"))
        expect(yield* balanceOf(devnet, tsla.address, addressOf(holder))).toBe(shares("2"))
      })
    )

    it.effect("EIP-3009: a relayer settles a signed transfer for a payer with no ETH, exactly once", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet } = clientsFor(devnet)
        const payerKey = generatePrivateKey()
        const payer = addressOf(payerKey)
        const payee = addressOf(generatePrivateKey())
        const relayer = wallet(key(devnet, 9))
        yield* mintUsd1(devnet, payer, usd1("100"))
        expect(yield* Effect.promise(() => client.getBalance({ address: payer }))).toBe(0n)

        const token = { address: devnet.usd1, abi: Usd1Artifact.abi } as const
        const { message, signature } = yield* signTransferAuthorization(devnet, payerKey, {
          to: payee,
          value: usd1("12.5"),
          validAfter: 0n,
          validBefore: nowSeconds() + 600n,
          nonce: randomNonce()
        })
        const { v, r, s } = parseSignature(signature)
        const vrsArgs = [
          message.from,
          message.to,
          message.value,
          message.validAfter,
          message.validBefore,
          message.nonce,
          Number(v),
          r,
          s
        ] as const
        const hash = yield* Effect.promise(() =>
          relayer.writeContract({ ...token, functionName: "transferWithAuthorization", args: vrsArgs })
        )
        const receipt = yield* mined(devnet, hash)
        expect(receipt.status).toBe("success")
        const events = parseEventLogs({ abi: Usd1Artifact.abi, logs: receipt.logs })
        expect(events.map((e) => e.eventName)).toEqual(["AuthorizationUsed", "Transfer"])
        expect(events[0]!.args).toEqual({ authorizer: payer, nonce: message.nonce })
        expect(yield* balanceOf(devnet, devnet.usd1, payer)).toBe(usd1("87.5"))
        expect(yield* balanceOf(devnet, devnet.usd1, payee)).toBe(usd1("12.5"))
        expect(
          yield* Effect.promise(() =>
            client.readContract({ ...token, functionName: "authorizationState", args: [payer, message.nonce] })
          )
        ).toBe(true)

        // replay: refused in simulation, and reverts when mined anyway
        expect(
          yield* revertOf(() =>
            client.simulateContract({
              ...token,
              functionName: "transferWithAuthorization",
              args: vrsArgs,
              account: relayer.account
            })
          )
        ).toBe("USD1: authorization is used or canceled")
        const replay = yield* Effect.promise(() =>
          relayer.writeContract({ ...token, functionName: "transferWithAuthorization", args: vrsArgs, gas: 200_000n })
        )
        expect((yield* mined(devnet, replay)).status).toBe("reverted")
        expect(yield* balanceOf(devnet, devnet.usd1, payee)).toBe(usd1("12.5"))
      })
    )

    it.effect("EIP-3009: bytes-signature overload, validity window, signer and payee checks, cancel", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet } = clientsFor(devnet)
        const payerKey = generatePrivateKey()
        const payer = addressOf(payerKey)
        // the payee submits receiveWithAuthorization itself, so it needs gas
        const payeeKey = generatePrivateKey()
        const payee = addressOf(payeeKey)
        const relayer = wallet(key(devnet, 9))
        const fundPayee = yield* Effect.promise(() => relayer.sendTransaction({ to: payee, value: parseEther("1") }))
        yield* mined(devnet, fundPayee)
        yield* mintUsd1(devnet, payer, usd1("50"))
        const payeeBefore = 0n
        const token = { address: devnet.usd1, abi: Usd1Artifact.abi } as const
        const now = nowSeconds()
        const bytesArgs = (
          m: {
            from: Address
            to: Address
            value: bigint
            validAfter: bigint
            validBefore: bigint
            nonce: Hex
          },
          signature: Hex
        ) => [m.from, m.to, m.value, m.validAfter, m.validBefore, m.nonce, signature] as const
        const simulate = (args: ReturnType<typeof bytesArgs>) =>
          revertOf(() =>
            client.simulateContract({
              ...token,
              functionName: "transferWithAuthorization",
              args,
              account: relayer.account
            })
          )

        // bytes overload settles
        const ok = yield* signTransferAuthorization(devnet, payerKey, {
          to: payee,
          value: usd1("5"),
          validAfter: now - 60n,
          validBefore: now + 600n,
          nonce: randomNonce()
        })
        const hash = yield* Effect.promise(() =>
          relayer.writeContract({
            ...token,
            functionName: "transferWithAuthorization",
            args: bytesArgs(ok.message, ok.signature)
          })
        )
        expect((yield* mined(devnet, hash)).status).toBe("success")
        expect(yield* balanceOf(devnet, devnet.usd1, payer)).toBe(usd1("45"))
        expect(yield* balanceOf(devnet, devnet.usd1, payee)).toBe(payeeBefore + usd1("5"))

        // expired
        const expired = yield* signTransferAuthorization(devnet, payerKey, {
          to: payee,
          value: usd1("1"),
          validAfter: 0n,
          validBefore: now - 1n,
          nonce: randomNonce()
        })
        expect(yield* simulate(bytesArgs(expired.message, expired.signature))).toBe("USD1: authorization is expired")
        // not yet valid
        const early = yield* signTransferAuthorization(devnet, payerKey, {
          to: payee,
          value: usd1("1"),
          validAfter: now + 3600n,
          validBefore: now + 7200n,
          nonce: randomNonce()
        })
        expect(yield* simulate(bytesArgs(early.message, early.signature))).toBe("USD1: authorization is not yet valid")
        // signed by someone else
        const forged = yield* signTransferAuthorization(devnet, generatePrivateKey(), {
          to: payee,
          value: usd1("1"),
          validAfter: 0n,
          validBefore: now + 600n,
          nonce: randomNonce()
        })
        expect(yield* simulate(bytesArgs({ ...forged.message, from: payer }, forged.signature))).toBe(
          "USD1: invalid signature"
        )
        // receiveWithAuthorization: only the payee may submit
        const receive = yield* Effect.promise(async () => {
          const nonce = randomNonce()
          const message = { from: payer, to: payee, value: usd1("2"), validAfter: 0n, validBefore: now + 600n, nonce }
          const signature = await privateKeyToAccount(payerKey).signTypedData({
            domain: {
              name: "World Liberty Financial USD",
              version: "1",
              chainId: 31337,
              verifyingContract: devnet.usd1
            },
            types: { ReceiveWithAuthorization: authorizationTypes.TransferWithAuthorization },
            primaryType: "ReceiveWithAuthorization",
            message
          })
          return bytesArgs(message, signature)
        })
        expect(
          yield* revertOf(() =>
            client.simulateContract({
              ...token,
              functionName: "receiveWithAuthorization",
              args: receive,
              account: relayer.account
            })
          )
        ).toBe("USD1: caller must be the payee")
        const received = yield* Effect.promise(() =>
          wallet(payeeKey).writeContract({ ...token, functionName: "receiveWithAuthorization", args: receive })
        )
        expect((yield* mined(devnet, received)).status).toBe("success")
        expect(yield* balanceOf(devnet, devnet.usd1, payer)).toBe(usd1("43"))

        // cancelAuthorization (v,r,s) burns the nonce
        const pending = yield* signTransferAuthorization(devnet, payerKey, {
          to: payee,
          value: usd1("1"),
          validAfter: 0n,
          validBefore: now + 600n,
          nonce: randomNonce()
        })
        const cancel = parseSignature(
          yield* Effect.promise(() =>
            privateKeyToAccount(payerKey).signTypedData({
              domain: {
                name: "World Liberty Financial USD",
                version: "1",
                chainId: 31337,
                verifyingContract: devnet.usd1
              },
              types: {
                CancelAuthorization: [
                  { name: "authorizer", type: "address" },
                  { name: "nonce", type: "bytes32" }
                ]
              },
              primaryType: "CancelAuthorization",
              message: { authorizer: payer, nonce: pending.message.nonce }
            })
          )
        )
        const cancelled = yield* Effect.promise(() =>
          relayer.writeContract({
            ...token,
            functionName: "cancelAuthorization",
            args: [payer, pending.message.nonce, Number(cancel.v), cancel.r, cancel.s]
          })
        )
        const cancelReceipt = yield* mined(devnet, cancelled)
        expect(parseEventLogs({ abi: Usd1Artifact.abi, logs: cancelReceipt.logs }).map((e) => e.eventName)).toEqual([
          "AuthorizationCanceled"
        ])
        expect(yield* simulate(bytesArgs(pending.message, pending.signature))).toBe(
          "USD1: authorization is used or canceled"
        )
      })
    )

    it.effect("EIP-2612 permit sets the allowance and bumps the nonce", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet } = clientsFor(devnet)
        const ownerKey = generatePrivateKey()
        const owner = privateKeyToAccount(ownerKey)
        const spender = addressOf(key(devnet, 9))
        const token = { address: devnet.usd1, abi: Usd1Artifact.abi } as const
        const deadline = nowSeconds() + 600n
        const signature = parseSignature(
          yield* Effect.promise(() =>
            owner.signTypedData({
              domain: {
                name: "World Liberty Financial USD",
                version: "1",
                chainId: 31337,
                verifyingContract: devnet.usd1
              },
              types: {
                Permit: [
                  { name: "owner", type: "address" },
                  { name: "spender", type: "address" },
                  { name: "value", type: "uint256" },
                  { name: "nonce", type: "uint256" },
                  { name: "deadline", type: "uint256" }
                ]
              },
              primaryType: "Permit",
              message: { owner: owner.address, spender, value: usd1("7"), nonce: 0n, deadline }
            })
          )
        )
        const hash = yield* Effect.promise(() =>
          wallet(key(devnet, 9)).writeContract({
            ...token,
            functionName: "permit",
            args: [owner.address, spender, usd1("7"), deadline, Number(signature.v), signature.r, signature.s]
          })
        )
        expect((yield* mined(devnet, hash)).status).toBe("success")
        const [allowance, nonce] = yield* Effect.promise(() =>
          Promise.all([
            client.readContract({ ...token, functionName: "allowance", args: [owner.address, spender] }),
            client.readContract({ ...token, functionName: "nonces", args: [owner.address] })
          ])
        )
        expect(allowance).toBe(usd1("7"))
        expect(nonce).toBe(1n)
      })
    )

    it.effect("DemoExchange buys 1 NVDA for exactly 181 USD1 paid to the recipient", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet } = clientsFor(devnet)
        const nvda = stock(devnet, "NVDA")
        const sellerKey = key(devnet, 5)
        const seller = wallet(sellerKey)
        const recipient = addressOf(generatePrivateKey())
        yield* mintStock(devnet, "NVDA", seller.account.address, shares("1"))
        const exchangeUsd1Before = yield* balanceOf(devnet, devnet.usd1, devnet.exchange)

        yield* approveExchange(devnet, seller, nvda.address, shares("1"))
        const exchange = { address: devnet.exchange, abi: DemoExchangeArtifact.abi } as const
        expect(
          yield* Effect.promise(() =>
            client.readContract({ ...exchange, functionName: "quote", args: [nvda.address, shares("1")] })
          )
        ).toBe(usd1("181"))
        expect(
          yield* revertOf(() =>
            client.simulateContract({
              ...exchange,
              functionName: "sell",
              args: [nvda.address, shares("1"), usd1("181.01"), recipient],
              account: seller.account
            })
          )
        ).toBe("DemoExchange: output below minimum")

        const hash = yield* Effect.promise(() =>
          seller.writeContract({
            ...exchange,
            functionName: "sell",
            args: [nvda.address, shares("1"), usd1("181"), recipient]
          })
        )
        const receipt = yield* mined(devnet, hash)
        expect(receipt.status).toBe("success")
        const sold = parseEventLogs({ abi: DemoExchangeArtifact.abi, logs: receipt.logs, eventName: "Sold" })
        expect(sold.map((e) => e.args)).toEqual([
          {
            seller: seller.account.address,
            stockToken: nvda.address,
            amountIn: shares("1"),
            usd1Out: usd1("181"),
            recipient
          }
        ])
        expect(yield* balanceOf(devnet, devnet.usd1, recipient)).toBe(usd1("181"))
        expect(yield* balanceOf(devnet, devnet.usd1, devnet.exchange)).toBe(exchangeUsd1Before - usd1("181"))
        expect(yield* balanceOf(devnet, nvda.address, seller.account.address)).toBe(0n)
        expect(yield* balanceOf(devnet, nvda.address, devnet.exchange)).toBe(shares("1"))
      })
    )

    it.effect("DemoExchange sells 2 TSLA for exactly 805 USD1, minted to the recipient", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet, anvil } = clientsFor(devnet)
        const tsla = stock(devnet, "TSLA")
        const buyerKey = generatePrivateKey()
        const buyer = wallet(buyerKey)
        const recipient = addressOf(generatePrivateKey())
        yield* mintUsd1(devnet, buyer.account.address, usd1("1000"))
        yield* Effect.promise(() =>
          anvil.setBalance({
            address: buyer.account.address,
            value: parseEther("1")
          })
        )
        const exchange = { address: devnet.exchange, abi: DemoExchangeArtifact.abi } as const
        yield* approveExchange(devnet, buyer, devnet.usd1, usd1("805"))
        expect(
          yield* Effect.promise(() =>
            client.readContract({ ...exchange, functionName: "quoteBuy", args: [tsla.address, usd1("805")] })
          )
        ).toBe(shares("2"))
        expect(
          yield* revertOf(() =>
            client.simulateContract({
              ...exchange,
              functionName: "buy",
              args: [tsla.address, usd1("805"), shares("2") + 1n, recipient],
              account: buyer.account
            })
          )
        ).toBe("DemoExchange: output below minimum")
        const exchangeUsd1Before = yield* balanceOf(devnet, devnet.usd1, devnet.exchange)
        const hash = yield* Effect.promise(() =>
          buyer.writeContract({
            ...exchange,
            functionName: "buy",
            args: [tsla.address, usd1("805"), shares("2"), recipient]
          })
        )
        const receipt = yield* mined(devnet, hash)
        expect(receipt.status).toBe("success")
        const bought = parseEventLogs({ abi: DemoExchangeArtifact.abi, logs: receipt.logs, eventName: "Bought" })
        expect(bought.map((e) => e.args)).toEqual([
          {
            buyer: buyer.account.address,
            stockToken: tsla.address,
            usd1In: usd1("805"),
            amountOut: shares("2"),
            recipient
          }
        ])
        expect(yield* balanceOf(devnet, tsla.address, recipient)).toBe(shares("2"))
        expect(yield* balanceOf(devnet, devnet.usd1, buyer.account.address)).toBe(usd1("195"))
        expect(yield* balanceOf(devnet, devnet.usd1, devnet.exchange)).toBe(exchangeUsd1Before + usd1("805"))
      })
    )

    it.effect("DemoExchange refuses a paused token and a non-positive price", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const { client, wallet } = clientsFor(devnet)
        const sellerKey = key(devnet, 6)
        const seller = wallet(sellerKey)
        const sellArgs = (token: Address) =>
          ({
            address: devnet.exchange,
            abi: DemoExchangeArtifact.abi,
            functionName: "sell",
            args: [token, shares("1"), 0n, seller.account.address],
            account: seller.account
          }) as const
        for (const symbol of ["AAPL", "SPY"]) {
          yield* mintStock(devnet, symbol, seller.account.address, shares("1"))
          yield* approveExchange(devnet, seller, stock(devnet, symbol).address, shares("1"))
        }
        const buyArgs = (token: Address) =>
          ({
            address: devnet.exchange,
            abi: DemoExchangeArtifact.abi,
            functionName: "buy",
            args: [token, usd1("1"), 0n, seller.account.address],
            account: seller.account
          }) as const
        const aapl = stock(devnet, "AAPL").address
        yield* setStockPaused(devnet, "AAPL", true)
        expect(yield* revertOf(() => client.simulateContract(sellArgs(aapl)))).toBe("DemoExchange: token is paused")
        expect(yield* revertOf(() => client.simulateContract(buyArgs(aapl)))).toBe("DemoExchange: token is paused")
        yield* setStockPaused(devnet, "AAPL", false)
        // succeeds once trading resumes
        yield* Effect.promise(() => client.simulateContract(sellArgs(aapl)))

        const spy = stock(devnet, "SPY").address
        yield* setStockPrice(devnet, "SPY", 0)
        expect(yield* revertOf(() => client.simulateContract(sellArgs(spy)))).toBe("DemoExchange: invalid price")
        expect(yield* revertOf(() => client.simulateContract(buyArgs(spy)))).toBe("DemoExchange: invalid price")
        yield* setStockPrice(devnet, "SPY", 665.4)
        yield* Effect.promise(() => client.simulateContract(sellArgs(spy)))
      })
    )
  }
)

// ---------------------------------------------------------------------------------------------------
// devnets of their own

const withDevnet = <A, E>(
  options: Parameters<typeof startDevnet>[0],
  f: (devnet: Devnet) => Effect.Effect<A, E>
): Effect.Effect<A, E | DevnetError | EmbeddedServerError> => Effect.scoped(Effect.flatMap(startDevnet(options), f))

describe("devnet lifecycle", () => {
  it.live("the exchange refuses a price older than a day, to sell and to buy", () =>
    withDevnet(undefined, (devnet) =>
      Effect.gen(function* () {
        const { client, wallet } = clientsFor(devnet)
        const seller = wallet(key(devnet, 1))
        const nvda = stock(devnet, "NVDA").address
        yield* mintStock(devnet, "NVDA", seller.account.address, shares("1"))
        yield* passTime(devnet, 86_401)
        expect(
          yield* revertOf(() =>
            client.simulateContract({
              address: devnet.exchange,
              abi: DemoExchangeArtifact.abi,
              functionName: "sell",
              args: [nvda, shares("1"), 0n, seller.account.address],
              account: seller.account
            })
          )
        ).toBe("DemoExchange: stale price")
        expect(
          yield* revertOf(() =>
            client.simulateContract({
              address: devnet.exchange,
              abi: DemoExchangeArtifact.abi,
              functionName: "buy",
              args: [nvda, usd1("1"), 0n, seller.account.address],
              account: seller.account
            })
          )
        ).toBe("DemoExchange: stale price")
        yield* setStockPrice(devnet, "NVDA", 181)
        expect(
          yield* Effect.promise(() =>
            client.readContract({
              address: devnet.exchange,
              abi: DemoExchangeArtifact.abi,
              functionName: "quote",
              args: [nvda, shares("1")]
            })
          )
        ).toBe(usd1("181"))
      })
    )
  )

  it.live("stateDir keeps addresses and chain state across restarts, and anvil stops with the scope", () =>
    Effect.gen(function* () {
      const stateDir = yield* Effect.acquireRelease(
        Effect.promise(() => mkdtemp(path.join(tmpdir(), "devnet-state-"))),
        (dir) => Effect.promise(() => rm(dir, { recursive: true, force: true }))
      )
      const holder = addressOf(generatePrivateKey())

      const first = yield* withDevnet({ stateDir }, (devnet) =>
        Effect.gen(function* () {
          yield* mintStock(devnet, "MSFT", holder, shares("7"))
          yield* mintUsd1(devnet, holder, usd1("3"))
          // 13 hours pass on chain: on restart the feeds (set at deployment) count as stale
          yield* passTime(devnet, 13 * 3600)
          return devnet
        })
      )
      // the scope closed: anvil is gone
      const afterClose = yield* Effect.exit(
        Effect.tryPromise(() =>
          createPublicClient({ transport: http(first.rpcUrl, { retryCount: 0 }) }).getBlockNumber()
        )
      )
      expect(Exit.isFailure(afterClose)).toBe(true)
      const manifest = JSON.parse(yield* Effect.promise(() => readFile(path.join(stateDir, "devnet.json"), "utf8")))
      expect(manifest.usd1).toBe(first.usd1)
      expect(manifest.exchange).toBe(first.exchange)

      const second = yield* withDevnet({ stateDir }, (devnet) =>
        Effect.gen(function* () {
          expect(yield* balanceOf(devnet, stock(devnet, "MSFT").address, holder)).toBe(shares("7"))
          expect(yield* balanceOf(devnet, devnet.usd1, holder)).toBe(usd1("3"))
          // the stale feeds were re-posted at their current answer
          const [roundId, answer, , updatedAt] = yield* Effect.promise(() =>
            clientsFor(devnet).client.readContract({
              address: stock(devnet, "MSFT").feed,
              abi: PriceFeedArtifact.abi,
              functionName: "latestRoundData"
            })
          )
          const block = yield* Effect.promise(() => clientsFor(devnet).client.getBlock())
          expect([roundId, answer]).toEqual([2n, 44_780_000_000n])
          expect(block.timestamp - updatedAt).toBeLessThan(60n)
          return devnet
        })
      )
      expect({ usd1: second.usd1, exchange: second.exchange, stocks: second.stocks }).toEqual({
        usd1: first.usd1,
        exchange: first.exchange,
        stocks: first.stocks
      })

      // an unreadable state file (torn by a hard kill) is moved aside and the chain starts afresh
      yield* Effect.promise(() => writeFile(path.join(stateDir, "anvil-state.json"), "{ torn"))
      yield* withDevnet({ stateDir }, (devnet) =>
        Effect.gen(function* () {
          expect(yield* balanceOf(devnet, stock(devnet, "MSFT").address, holder)).toBe(0n)
          expect(yield* balanceOf(devnet, devnet.usd1, addressOf(key(devnet, 3)))).toBe(usd1("10000"))
        })
      )
    }).pipe(Effect.scoped)
  )

  it.live(
    "a state of the first layout gets an exchange that also buys, the account factory and the Multicall3 code",
    () =>
      Effect.gen(function* () {
        const stateDir = yield* Effect.acquireRelease(
          Effect.promise(() => mkdtemp(path.join(tmpdir(), "devnet-upgrade-"))),
          (dir) => Effect.promise(() => rm(dir, { recursive: true, force: true }))
        )
        const manifestFile = path.join(stateDir, "devnet.json")
        const holder = addressOf(generatePrivateKey())
        const first = yield* withDevnet({ stateDir }, (devnet) =>
          Effect.gen(function* () {
            yield* mintUsd1(devnet, holder, usd1("3"))
            // as a chain from before the Multicall3 code was placed
            yield* Effect.promise(() =>
              clientsFor(devnet).anvil.setCode({ address: MULTICALL3_ADDRESS, bytecode: "0x" })
            )
            return devnet
          })
        )
        // as the manifest of the first layout
        const old = JSON.parse(yield* Effect.promise(() => readFile(manifestFile, "utf8")))
        expect(old.version).toBe(3)
        const { accountFactory: _, ...firstLayout } = old
        yield* Effect.promise(() => writeFile(manifestFile, JSON.stringify({ ...firstLayout, version: 1 })))

        const second = yield* withDevnet({ stateDir }, (devnet) =>
          Effect.gen(function* () {
            const { client } = clientsFor(devnet)
            expect(devnet.exchange).not.toBe(first.exchange)
            expect(devnet.accountFactory).not.toBe(first.accountFactory)
            const owner = addressOf(generatePrivateKey())
            expect(yield* smartAccountAddress(devnet, { owner, salt: 0n })).toMatch(/^0x[0-9a-fA-F]{40}$/)
            expect({ usd1: devnet.usd1, stocks: devnet.stocks }).toEqual({ usd1: first.usd1, stocks: first.stocks })
            expect(yield* balanceOf(devnet, devnet.usd1, holder)).toBe(usd1("3"))
            expect(yield* Effect.promise(() => client.getCode({ address: MULTICALL3_ADDRESS }))).toBe(
              MulticallArtifact.deployedBytecode
            )
            expect(yield* balanceOf(devnet, devnet.usd1, devnet.exchange)).toBe(usd1("10000000"))
            for (const s of devnet.stocks) {
              const [feed, minter] = yield* Effect.promise(() =>
                Promise.all([
                  client.readContract({
                    address: devnet.exchange,
                    abi: DemoExchangeArtifact.abi,
                    functionName: "feedOf",
                    args: [s.address]
                  }),
                  client.readContract({
                    address: s.address,
                    abi: StockTokenArtifact.abi,
                    functionName: "isMinter",
                    args: [devnet.exchange]
                  })
                ])
              )
              expect([feed, minter]).toEqual([s.feed, true])
            }
            // the new exchange sells stock for USD1
            const buyer = clientsFor(devnet).wallet(key(devnet, 4))
            yield* approveExchange(devnet, buyer, devnet.usd1, usd1("181"))
            const nvda = stock(devnet, "NVDA").address
            const bought = yield* Effect.promise(() =>
              buyer.writeContract({
                address: devnet.exchange,
                abi: DemoExchangeArtifact.abi,
                functionName: "buy",
                args: [nvda, usd1("181"), shares("1"), holder]
              })
            )
            expect((yield* mined(devnet, bought)).status).toBe("success")
            expect(yield* balanceOf(devnet, nvda, holder)).toBe(shares("1"))
            return devnet
          })
        )
        expect(JSON.parse(yield* Effect.promise(() => readFile(manifestFile, "utf8")))).toMatchObject({
          version: 3,
          exchange: second.exchange,
          accountFactory: second.accountFactory
        })
        // up to date: the next start reuses it as it is
        const third = yield* withDevnet({ stateDir }, Effect.succeed)
        expect({ exchange: third.exchange, accountFactory: third.accountFactory }).toEqual({
          exchange: second.exchange,
          accountFactory: second.accountFactory
        })
      }).pipe(Effect.scoped)
  )

  it.live("an unusable stateDir fails with an EmbeddedServerError naming anvil and the folder", () =>
    Effect.gen(function* () {
      const dir = yield* Effect.acquireRelease(
        Effect.promise(() => mkdtemp(path.join(tmpdir(), "devnet-bad-"))),
        (dir) => Effect.promise(() => rm(dir, { recursive: true, force: true }))
      )
      // a stateDir that is a file cannot be created
      const notADir = path.join(dir, "file")
      yield* Effect.promise(() => writeFile(notADir, "x"))
      const error = yield* Effect.flip(Effect.scoped(startDevnet({ stateDir: notADir })))
      expect(error).toMatchObject({ _tag: "EmbeddedServerError", server: "anvil", path: notADir })
      expect(error.message).toMatch(/^anvil did not start \(.+\/file\): cannot create the state folder: /)
    }).pipe(Effect.scoped)
  )
})
