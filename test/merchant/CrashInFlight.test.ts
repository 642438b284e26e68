/**
 * SIGKILL with 10 relayer transactions in flight (issue 26, item 1). On a devnet mining a block a
 * second, the service takes 10 payments at once and is killed as soon as all 10 are journaled
 * (some broadcast, maybe some mined, maybe some not broadcast yet). Restarted, the relayer takes up
 * its nonces from the chain and the journal: every one of the 10 is settled (or, had it been refused,
 * cleanly reopened), a later payment settles behind them (no nonce gap), and no payment is sent
 * twice: transfers on chain = paid orders, one relayer nonce each.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { callService, devnetServiceEnv, type ServiceProcess, startService, stopService } from "../support/process.js"
import { devnetRpc, devnetWithDatabase, usd1TransfersTo } from "../support/TestChain.js"
import { queryDatabase as query } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"
import { signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[7]!)
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const IN_FLIGHT = 10

/** A new order and its signed payment, not sent yet. */
const signedOrder = (service: ServiceProcess) =>
  Effect.gen(function* () {
    const order = (yield* callService(service, "POST", "/merchant/orders", {
      json: { amount: "1", description: "kill" }
    })).body
    const offer = yield* callService(service, "GET", `/merchant/orders/${order.id}/pay`)
    const payment = yield* Effect.promise(() => signPayment(payer, offer.body))
    return { id: order.id as string, header: payment.header }
  })

describe("a crash with relayer transactions in flight", () => {
  it.live(
    "SIGKILL with 10 in flight: after restart each is settled, no nonce gap, nothing sent twice",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const env = yield* devnetServiceEnv(devnet, databaseUrl, {
          MERCHANT_PAY_TO: merchant.address,
          RECONCILE_INTERVAL: "200 millis",
          LOG_LEVEL: "Info"
        })
        const first = yield* startService(env)
        const orders = yield* Effect.forEach(Array.from({ length: IN_FLIGHT }), () => signedOrder(first))
        const sentBefore = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))
        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* devnetRpc(devnet, "evm_setIntervalMining", [1])
        for (const order of orders) {
          yield* Effect.forkDaemon(
            Effect.tryPromise(() =>
              fetch(`${first.baseUrl}/merchant/orders/${order.id}/pay`, {
                method: "POST",
                headers: { "payment-signature": order.header }
              })
            ).pipe(Effect.ignore)
          )
        }
        yield* eventually(
          "all 10 transactions to be journaled",
          query(databaseUrl, "SELECT tx_hash FROM relayed_transactions"),
          (rows) => rows.length >= IN_FLIGHT,
          { every: "5 millis" }
        )
        expect(yield* stopService(first, "SIGKILL")).toBe(null)

        const second = yield* startService(env)
        const later = yield* signedOrder(second)
        const laterAnswer = yield* callService(second, "POST", `/merchant/orders/${later.id}/pay`, {
          headers: { "payment-signature": later.header }
        })
        expect([200, 202]).toContain(laterAnswer.status)
        const all = [...orders, later]
        const settled = yield* eventually(
          "every payment to be settled",
          Effect.forEach(all, (order) =>
            callService(second, "GET", `/merchant/orders/${order.id}`).pipe(Effect.map((answer) => answer.body))
          ),
          (bodies) => bodies.every((body) => body?.status === "paid" || body?.status === "open"),
          { explain: () => second.output().slice(-5000) }
        )
        const paid = settled.filter((body) => body.status === "paid")
        // The chain's word: Transfer events to the merchant, one per paid order, each in that order's transaction.
        const transfers = yield* usd1TransfersTo(devnet, merchant.address)
        expect(transfers).toHaveLength(paid.length)
        expect(new Set(transfers.map((log) => log.transactionHash))).toEqual(new Set(paid.map((body) => body.tx)))
        // Everything was settled here (nothing refused): all 11 paid, on 11 consecutive relayer nonces.
        expect(paid).toHaveLength(all.length)
        const sentAfter = yield* eventually(
          "the relayer's transactions to be mined",
          Effect.promise(() => client.getTransactionCount({ address: RELAYER })),
          (count) => count >= sentBefore + all.length
        )
        expect(sentAfter).toBe(sentBefore + all.length)
        const pending = yield* Effect.promise(() =>
          client.getTransactionCount({ address: RELAYER, blockTag: "pending" })
        )
        expect(pending).toBe(sentAfter)
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    240_000
  )
})
