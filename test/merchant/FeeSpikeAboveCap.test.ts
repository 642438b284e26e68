/**
 * Issue 44, item 3: a base-fee spike above MAX_FEE_PER_GAS (50 gwei) with payments flowing, driven
 * by blocks: the devnet mines only when the test says, each of SPIKE_BLOCKS blocks at a base fee of
 * 100 gwei (the 30 s at Base's 2 s blocks), a payment after each of the first PAYMENTS.
 * Nothing the relayer signs can be mined meanwhile: it signs RELAYER_MAX_IN_FLIGHT settlements,
 * which wait at their nonces (202 settling), and refuses the next payments before reserving anything
 * (503 RELAYER_PRICED_OUT, Retry-After). After the spike every payment settles exactly once, the
 * relayer's transactions on chain are exactly the settlements (no empty nonce fill, none reverted),
 * and the nonce-gap counter equals the transactions its gap sent.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createPublicClient, http, isAddressEqual, parseGwei, toHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { captureLogs } from "../support/logs.js"
import { metricValue } from "../support/metrics.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import { signedOrder } from "../support/settlements.js"
import { devnetRpc, TestDevnet, usd1TransfersTo } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const IN_FLIGHT = 3
const PAYMENTS = 8
const SPIKE_BLOCKS = 15

const logs = captureLogs()
const said = (level: "WARN", prefix: string) => logs.said(level, prefix).map((line) => line.message)

const aboveCap = metricValue("relayer_base_fee_above_cap")
const revertedCount = metricValue(`relayer_transactions_reverted_total{relayer="${RELAYER}"}`)
const gapCount = (action: "resent" | "filled") =>
  metricValue(`relayer_nonce_gap_transactions_total{action="${action}"}`)

layer(
  testServer({
    MERCHANT_PAY_TO: merchant.address,
    MAX_FEE_PER_GAS: "50",
    RELAYER_MAX_IN_FLIGHT: String(IN_FLIGHT),
    RELAYER_STUCK_AFTER: "2 seconds",
    RECONCILE_INTERVAL: "500 millis",
    SETTLEMENT_WAIT: "1 second"
  }).pipe(Layer.provide(logs.layer)),
  { excludeTestServices: true, timeout: "180 seconds" }
)("a base-fee spike above MAX_FEE_PER_GAS, block by block", (it) => {
  it.effect(
    "the relayer holds its in-flight bound (202), refuses beyond it (503); after the spike each payment settles once, no fill, no revert",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const sql = yield* SqlClient.SqlClient
        const client = createPublicClient({ transport: http(devnet.rpcUrl), cacheTime: 0 })
        const mineAt = (gwei: string) =>
          devnetRpc(devnet, "anvil_setNextBlockBaseFeePerGas", [toHex(parseGwei(gwei))]).pipe(
            Effect.zipRight(devnetRpc(devnet, "evm_mine"))
          )
        const payers = Array.from({ length: PAYMENTS }, () => privateKeyToAccount(generatePrivateKey()))
        for (const payer of payers) yield* mintUsd1(devnet, payer.address, enoughFor("2")).pipe(Effect.orDie)
        const orders = yield* Effect.forEach(payers, (payer) => signedOrder(payer, "2", "fee spike"))
        const pay = (order: (typeof orders)[number]) =>
          send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "PAYMENT-SIGNATURE": order.header } })
        const firstBlock = (yield* Effect.promise(() => client.getBlockNumber())) + 1n
        const firstNonce = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))
        const resentBefore = yield* gapCount("resent")
        const filledBefore = yield* gapCount("filled")
        const revertedBefore = yield* revertedCount

        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        const answers: Array<{
          readonly status: number
          readonly body: unknown
          readonly retryAfter: string | undefined
        }> = []
        for (let block = 1; block <= SPIKE_BLOCKS; block++) {
          yield* mineAt("100")
          if (block === 1) yield* eventually("the relayer to see the spike", aboveCap, (above) => above === 1)
          if (block <= PAYMENTS) {
            const answer = yield* pay(orders[block - 1]!)
            answers.push({ status: answer.status, body: answer.body, retryAfter: answer.headers["retry-after"] })
          }
        }

        // The bound held: IN_FLIGHT settlements signed and waiting (the node refused their fee), the rest refused.
        expect(answers.slice(0, IN_FLIGHT).map((answer) => [answer.status, answer.body])).toEqual(
          Array(IN_FLIGHT).fill([202, expect.objectContaining({ status: "settling" })])
        )
        for (const answer of answers.slice(IN_FLIGHT)) {
          expect(answer.status).toBe(503)
          expect(answer.body).toEqual({ error: expect.any(String), code: "RELAYER_PRICED_OUT" })
          expect(Number(answer.retryAfter)).toBeGreaterThan(0)
        }
        const journaled = yield* sql<{ readonly nonces: number }>`
          SELECT count(DISTINCT nonce)::int AS nonces FROM relayed_transactions
          WHERE sender = ${RELAYER} AND nonce >= ${firstNonce}`
        expect(journaled[0]!.nonces).toBe(IN_FLIGHT)
        const refused = orders.slice(IN_FLIGHT)
        expect(yield* sql`SELECT 1 FROM settlements WHERE order_id IN ${sql.in(refused.map((o) => o.id))}`).toEqual([])
        expect(said("WARN", "settlement transaction waits at nonce")).toHaveLength(IN_FLIGHT)
        if (!withoutPromtool) expect(promtoolProblems(String((yield* send("GET", "/metrics")).body))).toBe("")

        // The spike over: the waiting settlements go out at their nonces, the refused payments are sent again.
        yield* devnetRpc(devnet, "evm_setAutomine", [true])
        yield* mineAt("1")
        yield* eventually("the relayer to see the spike over", aboveCap, (above) => above === 0)
        for (const order of refused) expect([200, 202]).toContain((yield* pay(order)).status)
        for (const { id } of orders) {
          yield* eventually(
            `order ${id} to be paid`,
            send("GET", `/merchant/orders/${id}`).pipe(Effect.map((response) => response.body.status)),
            (status) => status === "paid"
          )
        }
        // Exactly once: one settlement per order, one transfer each; the relayer sent nothing else.
        const settlements = yield* sql<{ readonly status: string }>`
          SELECT status FROM settlements WHERE order_id IN ${sql.in(orders.map((o) => o.id))}`
        expect(settlements.map((row) => row.status)).toEqual(Array(PAYMENTS).fill("succeeded"))
        const transfers = yield* usd1TransfersTo(devnet, merchant.address)
        expect(new Set(transfers.map((log) => log.transactionHash)).size).toBe(PAYMENTS)
        const head = yield* Effect.promise(() => client.getBlockNumber())
        const blocks = yield* Effect.forEach(Array.from({ length: Number(head - firstBlock) + 1 }), (_, i) =>
          Effect.promise(() => client.getBlock({ blockNumber: firstBlock + BigInt(i), includeTransactions: true }))
        )
        const relayed = blocks.flatMap((block) => block.transactions).filter((tx) => isAddressEqual(tx.from, RELAYER))
        const receipts = yield* Effect.forEach(relayed, (tx) =>
          Effect.promise(() => client.getTransactionReceipt({ hash: tx.hash }))
        )
        const emptyFills = relayed.filter((tx) => tx.input === "0x").length
        const reverted = receipts.filter((receipt) => receipt.status !== "success").length
        const gaps = said("WARN", "relayer nonce gap:")
        const resent = (yield* gapCount("resent")) - resentBefore
        const filled = (yield* gapCount("filled")) - filledBefore
        console.log(
          `fee spike above the cap: ${answers.map((answer) => answer.status).join(" ")}; ` +
            `${relayed.length} relayer transactions for ${transfers.length} transfers, ${emptyFills} empty, ` +
            `${reverted} reverted; counted ${resent} resent ${filled} filled; ${gaps.join(" | ")}`
        )
        expect(relayed.map((tx) => tx.to)).toEqual(Array(PAYMENTS).fill(devnet.usd1.toLowerCase()))
        expect([emptyFills, reverted, (yield* revertedCount) - revertedBefore]).toEqual([0, 0, 0])
        // The one gap is the waiting settlements, sent again at their own nonces once the fee fell: the
        // counter counts them once each, as they are on chain, and no fill.
        const waiting = `${firstNonce}-${firstNonce + IN_FLIGHT - 1}`
        expect(gaps).toEqual([
          expect.stringMatching(
            new RegExp(
              `; nonces ${waiting}: ${IN_FLIGHT} recorded transaction\\(s\\) sent again, 0 nonce\\(s\\) filled$`
            )
          )
        ])
        expect([resent, filled]).toEqual([IN_FLIGHT, 0])
        expect(relayed.slice(0, IN_FLIGHT).map((tx) => tx.nonce)).toEqual(
          Array.from({ length: IN_FLIGHT }, (_, i) => firstNonce + i)
        )
        // The spike said once, not per payment refused.
        expect(said("WARN", "the chain's base fee")).toHaveLength(1)
      }).pipe(Effect.ensuring(Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "evm_setAutomine", [true]))))
  )
})
