/**
 * Steps of the live-agent tests over the real service as separate processes, one database and one
 * devnet: customers through the real sign-in and sandbox identity check, their wallets funded as the
 * embedded devnet's faucet would, and one agent tick at a chosen instant as its own process.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { expect } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { createPublicClient, createWalletClient, erc20Abi, http, maxUint256, parseUnits } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { awaitReceipt, type Devnet } from "../../../src/chain/Devnet.js"
import { mintStock, mintUsd1 } from "../../../src/chain/DevnetOperator.js"
import { callService, devnetServiceEnv, type ServiceProcess, sandboxCardHolder } from "../../support/process.js"
import { devnetRpc as rpc } from "../../support/TestChain.js"
import { queryDatabase as query } from "../../support/TestDatabase.js"
import { eventually } from "../../support/wait.js"

/** Friday 2026-11-20 15:40 ET: a token may be sold. */
export const FRIDAY_1540_ET = Date.parse("2026-11-20T20:40:00Z")

export const serviceEnv = (devnet: Devnet, databaseUrl: string, agent: Record<string, string>) =>
  devnetServiceEnv(devnet, databaseUrl, {
    AGENT_WALLET_SEED: "replica-test-seed-0123456789abcdef",
    KYC_SANDBOX_SECRET: "replica-test-sandbox-secret",
    CARD_DATA_KEY: "3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f10",
    RATE_LIMIT_SIGNIN: "100000",
    ...agent
  })

/** A new user signed in, approved by the sandbox provider, with a strategy: answers its token and address. */
export const newCustomer = (service: ServiceProcess, strategy: unknown) =>
  Effect.gen(function* () {
    const { account, token } = yield* sandboxCardHolder(service)
    yield* eventually(
      `the identity check of ${account.address} to be approved`,
      callService(service, "GET", "/me", { token }),
      (me) => me.body?.kyc === "approved"
    )
    expect((yield* callService(service, "PUT", "/strategy", { token, json: strategy })).status).toBe(200)
    const { wallet } = (yield* callService(service, "GET", "/portfolio", { token })).body
    return { token, address: account.address, wallet: wallet as `0x${string}` }
  })

/**
 * A configured chain has no faucet: the test gives each agent wallet gas, $25 of USD1 and, when
 * asked, stock tokens, as the embedded devnet's faucet would (one at a time: one deployer nonce).
 */
export const fund = (
  devnet: Devnet,
  wallets: ReadonlyArray<`0x${string}`>,
  options: { readonly stocks?: boolean } = {}
) =>
  Effect.forEach(
    wallets,
    (wallet) =>
      Effect.gen(function* () {
        yield* rpc(devnet, "anvil_setBalance", [wallet, "0xde0b6b3a7640000"])
        yield* mintUsd1(devnet, wallet, parseUnits("25", 18))
        if (options.stocks) {
          for (const stock of devnet.stocks) yield* mintStock(devnet, stock.symbol, wallet, parseUnits("1", 18))
        }
      }).pipe(Effect.orDie),
    { discard: true }
  )

export const usd1Of = (devnet: Devnet, owner: `0x${string}`) =>
  Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).readContract({
      address: devnet.usd1,
      abi: erc20Abi,
      functionName: "balanceOf",
      args: [owner]
    })
  )

/** Waits until the query's first row satisfies `done`. */
export const awaitRow = <A>(
  databaseUrl: string,
  text: string,
  values: ReadonlyArray<unknown>,
  done: (row: A | undefined) => boolean
) =>
  eventually(`a row of: ${text}`, query<A>(databaseUrl, text, values), (rows) => done(rows[0])).pipe(
    Effect.map((rows) => rows[0]!)
  )

/** Approves the exchange to take every stock token of the wallet of `key`, as its first trade would. */
export const approveExchange = (devnet: Devnet, key: Redacted.Redacted<`0x${string}`>) =>
  Effect.forEach(
    devnet.stocks,
    (stock) =>
      Effect.promise(() =>
        createWalletClient({
          account: privateKeyToAccount(Redacted.value(key)),
          transport: http(devnet.rpcUrl)
        }).writeContract({
          chain: null,
          address: stock.address,
          abi: erc20Abi,
          functionName: "approve",
          args: [devnet.exchange, maxUint256]
        })
      ).pipe(
        Effect.flatMap((hash) => awaitReceipt(devnet, hash, `approve ${stock.symbol}`)),
        Effect.orDie
      ),
    { discard: true }
  )

/** The one-tick harness as its own process (SIGKILLed by the crash test). */
export const spawnTick = (env: Record<string, string>, at: number) =>
  Effect.acquireRelease(
    Effect.sync(
      () =>
        spawn(process.execPath, ["--import", "tsx", "test/agent/support/tick.ts"], {
          env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env, AGENT_TICK_AT: String(at) },
          stdio: "ignore"
        }) as ChildProcess
    ),
    (child) => Effect.sync(() => child.exitCode === null && child.kill("SIGKILL"))
  )
