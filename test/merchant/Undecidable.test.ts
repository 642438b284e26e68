/**
 * Undecidable settlements cannot starve the rest. Fifty abandoned settlements whose chain calls
 * fail (a transaction hash nobody knows, bytes no node accepts) sit in the table: a new payment
 * still settles, and a decidable abandoned settlement behind them is decided within a few ticks,
 * as the reconciler takes the least recently checked first and holds no row lock while it asks the
 * chain.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[4]!)

const server = testServer({
  MERCHANT_PAY_TO: merchant.address,
  RECONCILE_INTERVAL: "200 millis",
  SETTLEMENT_RECONCILE_AFTER: "1 second"
})

const order = Effect.gen(function* () {
  const created = yield* send("POST", "/merchant/orders", { json: { amount: "1", description: "undecidable" } })
  const offer = yield* send("GET", `/merchant/orders/${created.body.id}/pay`)
  return { id: created.body.id as string, offer: offer.body as Offer }
})

/** An order left settling by a replica that died, with its settlement as given. */
const abandoned = (settlement: { readonly status: "pending" | "broadcast"; readonly tx: string | null }) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const { id, offer } = yield* order
    const { payload } = yield* Effect.promise(() => signPayment(payer, offer))
    const { authorization } = payload.payload
    yield* sql`UPDATE orders SET status = 'settling' WHERE id = ${id}`
    yield* sql`INSERT INTO settlements
                 (order_id, payer, nonce, amount_atomic, valid_before, payload, status, tx_hash, raw_tx, owner,
                  created_at, updated_at)
               VALUES (${id}, ${payer.address}, ${authorization.nonce}, ${authorization.value},
                       ${authorization.validBefore}, ${JSON.stringify(payload)}::jsonb, ${settlement.status},
                       ${settlement.tx}, ${settlement.tx === null ? null : "0xdeadbeef"}, 'a-dead-replica', now(), now())`
    return id
  }).pipe(Effect.orDie)

layer(server, { excludeTestServices: true, timeout: "240 seconds" })("50 undecidable settlements", (it) => {
  it.effect("do not stop a new payment, nor the reconciler deciding one behind them", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const stuck = yield* Effect.forEach(
        Array.from({ length: 50 }),
        () => abandoned({ status: "broadcast", tx: `0x${randomBytes(32).toString("hex")}` }),
        { concurrency: 4 }
      )
      // Decidable: recorded before broadcast and no transaction recorded, so nothing was sent.
      const decidable = yield* abandoned({ status: "pending", tx: null })

      const { id, offer } = yield* order
      const { header } = yield* Effect.promise(() => signPayment(payer, offer))
      const paid = yield* send("POST", `/merchant/orders/${id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })
      expect(paid.status).toBe(200)
      expect(paid.body.status).toBe("paid")

      yield* eventually(
        "the decidable settlement behind them to be decided",
        send("GET", `/merchant/orders/${decidable}`),
        (answer) => answer.body?.status === "open"
      )
      // The undecidable ones are still undecided, each checked in turn.
      const left = yield* sql<{ status: string; checked: boolean }>`
        SELECT status, checked_at IS NOT NULL AS checked FROM settlements WHERE order_id IN ${sql.in(stuck)}`
      expect(left.filter((row) => row.status === "broadcast")).toHaveLength(50)
      yield* eventually(
        "every undecidable settlement to have been checked",
        sql<{ n: number }>`SELECT count(*)::int AS n FROM settlements
                           WHERE order_id IN ${sql.in(stuck)} AND checked_at IS NOT NULL`,
        (rows) => rows[0]!.n === 50
      )
    })
  )
})
