/**
 * Issue 44, item 3: a base-fee spike above MAX_FEE_PER_GAS (50 gwei) under payments, on the devnet
 * with a block a second. The base fee is set to 100 gwei once: empty blocks lower it by 12.5 % each,
 * so it stays above the cap for about six blocks. A settlement the node refuses as underpriced
 * waits: it is never signed again at a new nonce, and no nonce is filled with an empty transaction.
 * After the spike every payment is paid once, and the relayer's transactions on chain are exactly
 * the settlements (none empty, none a reverted copy).
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, http, parseGwei } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { metricValue } from "../support/metrics.js"
import { signedOrder } from "../support/settlements.js"
import { devnetRpc, TestDevnet, usd1TransfersTo } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const PAYMENTS = 6

const filledCount = metricValue('relayer_nonce_gap_transactions_total{action="filled"}')

layer(
  testServer({
    MERCHANT_PAY_TO: merchant.address,
    RELAYER_STUCK_AFTER: "2 seconds",
    RECONCILE_INTERVAL: "500 millis",
    MAX_FEE_PER_GAS: "50"
  }),
  { excludeTestServices: true, timeout: "180 seconds" }
)("a base-fee spike above MAX_FEE_PER_GAS", (it) => {
  it.effect(
    "payments during the spike wait and are paid once after it: no empty nonce fill, no reverted relayer transaction",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const payers = Array.from({ length: PAYMENTS }, () => privateKeyToAccount(generatePrivateKey()))
        for (const payer of payers) yield* mintUsd1(devnet, payer.address, enoughFor("2")).pipe(Effect.orDie)
        const orders = yield* Effect.forEach(payers, (payer) => signedOrder(payer, "2", "fee spike"))
        const sentBefore = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))
        const filledBefore = yield* filledCount

        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* devnetRpc(devnet, "evm_setIntervalMining", [1])
        yield* devnetRpc(devnet, "anvil_setNextBlockBaseFeePerGas", [`0x${parseGwei("100").toString(16)}`])
        yield* eventually(
          "the spike to be mined",
          Effect.promise(() => client.getBlock()),
          (block) => (block.baseFeePerGas ?? 0n) > parseGwei("50")
        )
        const answers = yield* Effect.forEach(
          orders,
          ({ id, header }) => send("POST", `/merchant/orders/${id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } }),
          { concurrency: "unbounded" }
        )
        expect(answers.map((answer) => answer.status).filter((status) => status !== 200 && status !== 202)).toEqual([])
        for (const { id } of orders) {
          yield* eventually(
            `order ${id} to be paid`,
            send("GET", `/merchant/orders/${id}`).pipe(Effect.map((response) => response.body.status)),
            (status) => status === "paid",
            { atMost: "90 seconds" }
          )
        }
        const transfers = yield* usd1TransfersTo(devnet, merchant.address)
        const sent = (yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))) - sentBefore
        console.log(
          `fee spike: ${transfers.length} transfers, ${sent} relayer transactions, ${(yield* filledCount) - filledBefore} fills counted`
        )
        expect(transfers).toHaveLength(PAYMENTS)
        expect(new Set(transfers.map((log) => log.transactionHash)).size).toBe(PAYMENTS)
        // Every relayer transaction mined is a settlement's transfer: none empty, none a reverted copy.
        expect(sent).toBe(PAYMENTS)
        expect((yield* filledCount) - filledBefore).toBe(0)
      }).pipe(Effect.ensuring(Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "evm_setAutomine", [true]))))
  )
})
