/**
 * The relayer's nonce checked at once when the chain says so, on the real service over a devnet,
 * with RECONCILE_INTERVAL at 10 minutes so that the tracker's timer cannot be what fixes anything:
 *
 * - the chain goes back under the service (`evm_revert` to a snapshot: the blocks of two paid
 *   orders are lost, as from a node restored from an older state): the block watcher sees the head
 *   go back, the recorded transactions are sent again, and the next payment settles;
 * - a gap whose close fails (the relayer has no gas to send its recorded transactions again):
 *   `/ready` answers 503 naming it until the gap is closed.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, erc20Abi, type Hex, http, parseEther, toHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS, type Devnet, startDevnet } from "../../src/chain/Devnet.js"
import {
  callService,
  devnetServiceEnv,
  logLines,
  type ServiceProcess,
  startService,
  stopService
} from "../support/process.js"
import { devnetRpc as rpc, usd1TransfersTo } from "../support/TestChain.js"
import { temporaryDatabaseUrl } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"
import { expectWorth, signPayment } from "../support/x402.js"

const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[4]!)
const relayer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!)

const client = (devnet: Devnet) => createPublicClient({ transport: http(devnet.rpcUrl) })

const balanceOf = (devnet: Devnet, owner: Hex) =>
  Effect.promise(() =>
    client(devnet).readContract({ address: devnet.usd1, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
  )

/** A new order of 1 USD1 paid by `payer`: the pay answer. */
const payOrder = (service: ServiceProcess) =>
  Effect.gen(function* () {
    const order = (yield* callService(service, "POST", "/merchant/orders", {
      json: { amount: "1", description: "nonce alarm" }
    })).body
    const offer = yield* callService(service, "GET", `/merchant/orders/${order.id}/pay`)
    const payment = yield* Effect.promise(() => signPayment(payer, offer.body))
    return yield* callService(service, "POST", `/merchant/orders/${order.id}/pay`, {
      headers: { "payment-signature": payment.header }
    })
  })

/** A service whose tracker and reconciler tick once at start, then not for 10 minutes. */
const startMerchant = (devnet: Devnet, merchant: Hex) =>
  Effect.gen(function* () {
    const databaseUrl = yield* temporaryDatabaseUrl
    return yield* startService(
      yield* devnetServiceEnv(devnet, databaseUrl, {
        MERCHANT_PAY_TO: merchant,
        RECONCILE_INTERVAL: "10 minutes",
        CHAIN_POLL_INTERVAL: "50 millis",
        LOG_LEVEL: "Info"
      })
    )
  })

/** A devnet and the merchant service over it, with one payment already settled. */
const servingOnePaid = Effect.gen(function* () {
  const devnet = yield* startDevnet().pipe(Effect.orDie)
  const merchant = privateKeyToAccount(generatePrivateKey()).address
  const service = yield* startMerchant(devnet, merchant)
  expect((yield* payOrder(service)).status).toBe(200)
  return { devnet, merchant, service }
})

const warnings = (service: ServiceProcess) =>
  logLines(service.output())
    .filter((line) => line.logLevel === "WARN")
    .map((line) => String(line.message))

describe("the relayer's nonce follows the chain at once", () => {
  it.live(
    "a chain that went back: the lost transfers are sent again before any tick, and the next payment settles",
    () =>
      Effect.gen(function* () {
        const { devnet, merchant, service } = yield* servingOnePaid
        const snapshot = (yield* rpc(devnet, "evm_snapshot")) as { readonly result: Hex }
        const lost = [yield* payOrder(service), yield* payOrder(service)]
        expect(lost.map((answer) => answer.status)).toEqual([200, 200])
        const reverted = (yield* rpc(devnet, "evm_revert", [snapshot.result])) as { readonly result: boolean }
        expect(reverted.result).toBe(true)

        // Nothing pays meanwhile and no tick is due: only the watcher can see the head go back.
        const transfers = yield* eventually(
          "the two lost transfers on chain again",
          usd1TransfersTo(devnet, merchant),
          (logs) => logs.length === 3,
          { explain: () => service.output().slice(-3000) }
        )
        expect(transfers.slice(1).map((log) => log.transactionHash)).toEqual(lost.map((answer) => answer.body.tx))
        // The gap's line is written once every missing nonce was sent again: maybe just after the transfers show.
        const warned = yield* eventually(
          "the nonce gap's WARN line",
          Effect.sync(() => warnings(service)),
          (lines) => lines.some((line) => /^relayer nonce gap: .* sent again/.test(line))
        )
        // Matched in the list, so that a failure shows every WARN line the service wrote.
        expect(warned).toContainEqual(expect.stringMatching(/^chain head went back: /))
        // counted right after the line is written
        yield* eventually("two re-sent transactions counted", callService(service, "GET", "/metrics"), (metrics) =>
          /relayer_nonce_gap_transactions_total\{[^}]*action="resent"[^}]*\} 2\b/.test(String(metrics.body))
        )

        // The relayer's next nonce follows the chain: the next payment is mined, not queued.
        const next = yield* payOrder(service)
        expect(next.status).toBe(200)
        expectWorth(yield* balanceOf(devnet, merchant), "4", 4)
        expect((yield* callService(service, "GET", "/ready")).status).toBe(200)
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    180_000
  )

  it.live(
    "a gap whose close fails: /ready answers 503 naming it, and 200 again once it is closed",
    () =>
      Effect.gen(function* () {
        const { devnet, merchant, service } = yield* servingOnePaid
        // The chain to go back to has a relayer without gas: the lost transfer cannot be sent again.
        const gas = (yield* Effect.promise(() => client(devnet).getBalance({ address: relayer.address }))) as bigint
        yield* rpc(devnet, "anvil_setBalance", [relayer.address, "0x0"])
        const snapshot = (yield* rpc(devnet, "evm_snapshot")) as { readonly result: Hex }
        yield* rpc(devnet, "anvil_setBalance", [relayer.address, toHex(gas)])
        const lost = yield* payOrder(service)
        expect(lost.status).toBe(200)
        yield* rpc(devnet, "evm_revert", [snapshot.result])

        const notReady = yield* eventually(
          "/ready to say the relayer is stuck on a gap",
          callService(service, "GET", "/ready"),
          (answer) => answer.status === 503,
          { explain: () => service.output().slice(-3000) }
        )
        expect(notReady.body.code).toBe("NOT_READY")
        expect(notReady.body.error).toMatch(/^not ready: relayer stuck: a relayer nonce gap could not be closed: /)

        yield* rpc(devnet, "anvil_setBalance", [relayer.address, toHex(parseEther("10"))])
        yield* eventually(
          "/ready to answer 200 once the gap is closed",
          callService(service, "GET", "/ready"),
          (answer) => answer.status === 200,
          { explain: () => service.output().slice(-3000) }
        )
        const transfers = yield* usd1TransfersTo(devnet, merchant)
        expect(transfers.map((log) => log.transactionHash)).toContain(lost.body.tx)
        expectWorth(yield* balanceOf(devnet, merchant), "2", 2)
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    180_000
  )
})
