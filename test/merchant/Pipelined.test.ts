/**
 * Pipelined relayer sends (issue 26, item 1): with 1-second blocks, 50 payments sent at once through
 * the one relayer are signed and broadcast without waiting for each other's receipts, and each
 * settles exactly once: transfers on chain = paid orders, one relayer nonce each. On the real devnet
 * (interval mining) and database, the service in process.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, http, parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { payAllAtOnce, signedOrder, usd1TransfersTo } from "../support/settlements.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const PAYERS = 10
const PAYMENTS_EACH = 5

layer(testServer({ MERCHANT_PAY_TO: merchant.address, RECONCILE_INTERVAL: "500 millis" }), {
  excludeTestServices: true
})("pipelined relayer sends", (it) => {
  it.effect(
    "50 payments in flight through one relayer with 1-second blocks settle exactly once each",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const sql = yield* SqlClient.SqlClient
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const payers = Array.from({ length: PAYERS }, () => privateKeyToAccount(generatePrivateKey()))
        // Twice what each spends: a payment whose balance read already saw one of the payer's others
        // in the node's pending state counts it twice and is refused by design (docs/merchant.md, the
        // reservation's balance check), which pipelined sends make likely. This test is about
        // pipelining and exactly-once; the balance check has its own (GasDrain).
        for (const payer of payers) {
          yield* mintUsd1(devnet, payer.address, parseUnits(String(2 * PAYMENTS_EACH), 18)).pipe(Effect.orDie)
        }
        const payments = yield* Effect.forEach(
          payers.flatMap((payer) => Array.from({ length: PAYMENTS_EACH }, () => payer)),
          (payer) => signedOrder(payer, "1", "pipe")
        )
        const sentBefore = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))
        const fromBlock = yield* Effect.promise(() => client.getBlockNumber())

        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* devnetRpc(devnet, "evm_setIntervalMining", [1])
        const answers = yield* payAllAtOnce(payments)
        for (const answer of answers) expect([200, 202]).toContain(answer.status)

        const orders = yield* eventually(
          "every order to be paid",
          Effect.forEach(payments, (payment) =>
            send("GET", `/merchant/orders/${payment.id}`).pipe(Effect.map((response) => response.body))
          ),
          (all) => all.every((order) => order.status === "paid")
        )
        const transfers = yield* usd1TransfersTo(devnet, merchant.address, fromBlock)
        // One transfer per order, in the order's own transaction; one relayer nonce per payment.
        expect(transfers).toHaveLength(payments.length)
        expect(new Set(transfers.map((log) => log.transactionHash))).toEqual(new Set(orders.map((order) => order.tx)))
        const sentAfter = yield* eventually(
          "the relayer's transactions to be mined",
          Effect.promise(() => client.getTransactionCount({ address: RELAYER })),
          (count) => count >= sentBefore + payments.length
        )
        expect(sentAfter).toBe(sentBefore + payments.length)
        const settlements = yield* sql<{ readonly status: string; readonly count: string }>`
          SELECT status, count(*) FROM settlements WHERE order_id IN ${sql.in(payments.map((p) => p.id))}
          GROUP BY status`
        expect(settlements).toEqual([{ status: "succeeded", count: String(payments.length) }])
      }),
    180_000
  )
})
