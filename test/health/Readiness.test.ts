/**
 * /ready asks the checks of the parts that are on (http/Feature.ts, health/Readiness.ts): with the
 * demo merchant on, a settlement left without a receipt says the relayer is stuck; with it off, the
 * same rows are none of /ready's business.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

/** A settlement broadcast an hour ago and never given a receipt (past SETTLEMENT_STUCK_AFTER's 2 minutes). */
const stuckSettlement = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const anHourAgo = new Date(Date.now() - 60 * 60_000)
  yield* sql`INSERT INTO orders (id, amount, amount_micros, description, status, created_at, expires_at)
             VALUES ('stuck', '1', 1000000, 'stuck', 'settling', ${anHourAgo}, ${new Date(Date.now() + 60_000)})`
  yield* sql`INSERT INTO settlements
               (order_id, payer, nonce, amount_atomic, valid_before, payload, status, created_at, updated_at)
             VALUES ('stuck', '0x0000000000000000000000000000000000000002', '0x01', 1, 1,
                     '{}'::jsonb, 'broadcast', ${anHourAgo}, ${anHourAgo})`
})

// The reconciler runs at start only: the stuck row stays as it is for the test.
const quietReconciler = { RECONCILE_INTERVAL: "1 hour" }

layer(
  testServer(
    { ...quietReconciler, MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD" },
    { chain: InMemoryChain.layer() }
  ),
  { excludeTestServices: true }
)("/ready with the demo merchant on", (it) => {
  it.effect("a settlement without a receipt past SETTLEMENT_STUCK_AFTER: 503, the relayer is stuck", () =>
    Effect.gen(function* () {
      expect((yield* send("GET", "/ready")).status).toBe(200)
      yield* stuckSettlement
      const notReady = yield* send("GET", "/ready")
      expect(notReady.status).toBe(503)
      expect(notReady.body).toEqual({
        error: "not ready: relayer stuck: 1 settlement(s) without a receipt for over 2m",
        code: "NOT_READY"
      })
    })
  )
})

layer(testServer(quietReconciler, { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "/ready with the demo merchant off",
  (it) => {
    it.effect("the merchant adds no check: the same settlement leaves the service ready", () =>
      Effect.gen(function* () {
        yield* stuckSettlement
        expect((yield* send("GET", "/ready")).status).toBe(200)
      })
    )
  }
)
