/**
 * A relayer pool (issue 26, item 2): RELAYER_PRIVATE_KEYS holds three keys, each with its own nonce
 * sequence and gas watch. Payments are spread over all three; a key drained of gas leaves the
 * rotation (its gauge at 0) and payments go on through the other two; with all three drained, new
 * payments answer 503 RELAYER_UNFUNDED before anything is reserved. On the real devnet and database.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { getAddress, parseEther } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { signedOrder } from "../support/settlements.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const KEYS = [ANVIL_ACCOUNT_KEYS[9]!, ANVIL_ACCOUNT_KEYS[8]!, ANVIL_ACCOUNT_KEYS[7]!]
const [first, second, third] = KEYS.map((key) => privateKeyToAccount(key).address) as [string, string, string]

const metricsText = send("GET", "/metrics").pipe(Effect.map((response) => String(response.body)))
const gauge = (relayer: string, value: 0 | 1) => `relayer_gas_funded{relayer="${relayer}"} ${value}`

/** Pays a new order of 1 USD1 from a fresh payer; answers the response and the order's id. */
const payOnce = Effect.gen(function* () {
  const devnet = yield* TestDevnet
  const payer = privateKeyToAccount(generatePrivateKey())
  yield* mintUsd1(devnet, payer.address, enoughFor("1")).pipe(Effect.orDie)
  const { id, header } = yield* signedOrder(payer, "1", "pool")
  const answer = yield* send("POST", `/merchant/orders/${id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })
  return { id, answer }
})

/** The relayer key that sent each order's settlement, from the journal. */
const sendersOf = (ids: ReadonlyArray<string>) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ readonly sender: string }>`SELECT t.sender FROM relayed_transactions t
                                             JOIN settlements s ON s.id = t.settlement_id
                                             WHERE s.order_id IN ${sql.in(ids)}`
  ).pipe(Effect.map((rows) => rows.map((row) => getAddress(row.sender))))

const drain = (relayer: string, wei: bigint) =>
  Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "anvil_setBalance", [relayer, `0x${wei.toString(16)}`]))

layer(
  testServer({
    MERCHANT_PAY_TO: merchant.address,
    RELAYER_PRIVATE_KEYS: KEYS.join(","),
    RELAYER_BALANCE_INTERVAL: "200 millis"
  }),
  { excludeTestServices: true }
)("a pool of three relayer keys", (it) => {
  it.effect(
    "spreads payments over all three; a drained key leaves the rotation; all drained: 503 RELAYER_UNFUNDED",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const spread = yield* Effect.forEach(Array.from({ length: 6 }), () => payOnce)
        expect(spread.map(({ answer }) => answer.status)).toEqual(Array(6).fill(200))
        expect(new Set(yield* sendersOf(spread.map(({ id }) => id)))).toEqual(new Set([first, second, third]))

        yield* drain(second, 0n)
        yield* eventually("the drained key to leave the rotation", metricsText, (text) =>
          text.includes(gauge(second, 0))
        )
        const without = yield* Effect.forEach(Array.from({ length: 4 }), () => payOnce)
        expect(without.map(({ answer }) => answer.status)).toEqual(Array(4).fill(200))
        expect(new Set(yield* sendersOf(without.map(({ id }) => id)))).toEqual(new Set([first, third]))

        yield* drain(first, 0n)
        yield* drain(third, 0n)
        yield* eventually("every key to be out", metricsText, (text) =>
          [first, second, third].every((relayer) => text.includes(gauge(relayer, 0)))
        )
        const refused = yield* payOnce
        expect(refused.answer.status).toBe(503)
        expect(refused.answer.body).toEqual({ error: expect.any(String), code: "RELAYER_UNFUNDED" })
        expect(Number(refused.answer.headers["retry-after"])).toBeGreaterThan(0)
        expect(yield* sql`SELECT 1 FROM settlements WHERE order_id = ${refused.id}`).toHaveLength(0)

        yield* drain(third, parseEther("10"))
        yield* eventually("the refunded key to be back", metricsText, (text) => text.includes(gauge(third, 1)))
        const back = yield* payOnce
        expect(back.answer.status).toBe(200)
        expect(yield* sendersOf([back.id])).toEqual([third])
      }),
    120_000
  )
})
