/**
 * A relayer that cannot pay gas (issue 18, item 3): once its balance (read every
 * RELAYER_BALANCE_INTERVAL, no call per payment) no longer pays its next transaction, a new payment
 * answers 503 RELAYER_UNFUNDED with Retry-After before anything is reserved; the
 * `relayer_gas_funded` gauge says 0 and one WARN line says it, however many payments are refused.
 * Funded again (the gauge at 1; its INFO line is below the test server's log level), payments
 * settle. On the real devnet and database.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Logger } from "effect"
import { parseEther } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import { signedOrder } from "../support/settlements.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const FUNDED_GAUGE = `relayer_gas_funded{relayer="${RELAYER}"}`

const lines: Array<{ readonly level: string; readonly message: string }> = []
const CaptureLogs = Logger.add(
  Logger.make(({ logLevel, message }) => {
    lines.push({ level: logLevel.label, message: String(message) })
  })
)
const said = (prefix: string) => lines.filter((line) => line.message.startsWith(prefix))

const metricsText = send("GET", "/metrics").pipe(Effect.map((response) => String(response.body)))

/** A signed payment of a new order of `amount`, from a payer holding exactly that. */
const fundedOrder = (amount: string) =>
  Effect.gen(function* () {
    const devnet = yield* TestDevnet
    const payer = privateKeyToAccount(generatePrivateKey())
    yield* mintUsd1(devnet, payer.address, enoughFor(amount)).pipe(Effect.orDie)
    return yield* signedOrder(payer, amount, "unfunded")
  })

const pay = (order: { readonly id: string; readonly header: string }) =>
  send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "PAYMENT-SIGNATURE": order.header } })

const setRelayerBalance = (wei: bigint) =>
  Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "anvil_setBalance", [RELAYER, `0x${wei.toString(16)}`]))

layer(
  testServer({ MERCHANT_PAY_TO: merchant.address, RELAYER_BALANCE_INTERVAL: "200 millis" }).pipe(
    Layer.provide(CaptureLogs)
  ),
  { excludeTestServices: true }
)("a relayer without gas", (it) => {
  it.effect(
    "new payments answer 503 RELAYER_UNFUNDED before any reservation; one WARN, the gauge at 0; funded again, they settle",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const orders = yield* Effect.forEach([1, 2, 3], () => fundedOrder("1"))
        yield* eventually("the relayer to be seen funded", metricsText, (text) => text.includes(`${FUNDED_GAUGE} 1`))

        yield* setRelayerBalance(0n)
        yield* eventually("the relayer to be seen unfunded", metricsText, (text) => text.includes(`${FUNDED_GAUGE} 0`))
        const answers = yield* Effect.forEach(orders, pay)
        for (const answer of answers) {
          expect(answer.status).toBe(503)
          expect(answer.body).toEqual({ error: expect.any(String), code: "RELAYER_UNFUNDED" })
          expect(Number(answer.headers["retry-after"])).toBeGreaterThan(0)
        }
        // Nothing reserved: no settlement, every order open.
        const reserved = yield* sql`SELECT 1 FROM settlements WHERE order_id IN ${sql.in(orders.map((o) => o.id))}`
        expect(reserved).toHaveLength(0)
        for (const order of orders) {
          expect((yield* send("GET", `/merchant/orders/${order.id}`)).body.status).toBe("open")
        }
        expect(said("relayer cannot pay gas")).toHaveLength(1)
        expect(said("relayer cannot pay gas")[0]!.level).toBe("WARN")
        if (!withoutPromtool) expect(promtoolProblems(yield* metricsText)).toBe("")

        yield* setRelayerBalance(parseEther("10"))
        yield* eventually("the relayer to be seen funded again", metricsText, (text) =>
          text.includes(`${FUNDED_GAUGE} 1`)
        )
        const paid = yield* Effect.forEach(orders, pay)
        expect(paid.map((answer) => answer.status)).toEqual([200, 200, 200])
        expect(said("relayer cannot pay gas")).toHaveLength(1)
      }),
    120_000
  )
})
