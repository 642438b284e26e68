/**
 * The pay path on the real chain client when the node stops answering while a payment is checked:
 * the answer is 503 CHAIN_UNAVAILABLE with nothing reserved, never a verdict the chain did not give
 * (a signature called invalid, a payment refused). Once the node answers, the same payment is paid.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { proxiedTestChain, TestDevnet, withNode } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())

const server = testServer(
  { MERCHANT_PAY_TO: merchant.address, CHAIN_TIMEOUT: "500 millis" },
  { chain: proxiedTestChain("500 millis") }
)

/** An open order of 2 USD1, what it asks for, and a payer holding 10 USD1. */
const openOrder = Effect.gen(function* () {
  const created = yield* send("POST", "/merchant/orders", { json: { amount: "2", description: "Tea" } })
  expect(created.status).toBe(200)
  const unpaid = yield* send("GET", `/merchant/orders/${created.body.id}/pay`)
  const payer = privateKeyToAccount(generatePrivateKey())
  yield* mintUsd1(yield* TestDevnet, payer.address, parseUnits("10", 18)).pipe(Effect.orDie)
  return { id: created.body.id as string, offer: unpaid.body as Offer, payer }
})

const payWith = (id: string, header: string) =>
  send("POST", `/merchant/orders/${id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })

const settlementsOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT id FROM settlements WHERE order_id = ${id}`)

layer(server, { excludeTestServices: true, timeout: "120 seconds" })("paying while the chain does not answer", (it) => {
  it.effect("is 503 CHAIN_UNAVAILABLE with nothing reserved; answered again, the same payment is paid", () =>
    Effect.gen(function* () {
      const { id, offer, payer } = yield* openOrder
      const { header } = yield* Effect.promise(() => signPayment(payer, offer))
      for (const mode of ["stall", "refuse"] as const) {
        const refused = yield* withNode(mode, payWith(id, header))
        expect(refused.status, mode).toBe(503)
        expect(refused.body.code, mode).toBe("CHAIN_UNAVAILABLE")
        expect(refused.headers["retry-after"], mode).toMatch(/^[1-9][0-9]*$/)
      }
      expect(yield* settlementsOf(id)).toHaveLength(0)
      expect((yield* send("GET", `/merchant/orders/${id}`)).body.status).toBe("open")

      const paid = yield* payWith(id, header)
      expect(paid.status).toBe(200)
      expect(paid.body).toMatchObject({ status: "paid", payer: payer.address })
    })
  )

  it.effect("a forged signature is called invalid only once the chain has judged it", () =>
    Effect.gen(function* () {
      const { id, offer, payer } = yield* openOrder
      const forger = privateKeyToAccount(generatePrivateKey())
      const { header } = yield* Effect.promise(() => signPayment(payer, offer, { signer: forger }))
      const unjudged = yield* withNode("stall", payWith(id, header))
      expect(unjudged.status).toBe(503)
      expect(unjudged.body.code).toBe("CHAIN_UNAVAILABLE")
      const judged = yield* payWith(id, header)
      expect(judged.status).toBe(402)
      expect(judged.body).toMatchObject({ code: "PAYMENT_INVALID", error: "invalid_exact_evm_signature" })
      expect(yield* settlementsOf(id)).toHaveLength(0)
    })
  )
})
