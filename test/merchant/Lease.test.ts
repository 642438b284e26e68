/**
 * The reconciler takes over a settlement once its owner (the replica that reserved it) stops
 * heartbeating, and never while the owner is alive. The merchant, its relayer processor and the
 * database are the real ones; the chain is in memory.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { Merchant } from "../../src/merchant/Merchant.js"
import { OrderRepo } from "../../src/merchant/OrderRepo.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { merchantInMemory, settlingOrder } from "../support/settlements.js"

const MerchantTest = merchantInMemory(RelayerProcessor, { SETTLEMENT_RECONCILE_AFTER: "6 seconds" })

layer(MerchantTest, { excludeTestServices: true })("settlement owners", (it) => {
  /** An order left settling by `owner`, with a reserved, never-recorded settlement (nothing sent). */
  const abandonedBy = (owner: string) => Effect.map(settlingOrder({ amount: "2", owner }), ({ orderId }) => orderId)

  const heartbeat = (owner: string, secondsAgo: number) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`INSERT INTO merchant_replicas (id, heartbeat_at)
                   VALUES (${owner}, now() - make_interval(secs => ${secondsAgo}))
                   ON CONFLICT (id) DO UPDATE SET heartbeat_at = EXCLUDED.heartbeat_at`
    )

  const stateOf = (orderId: string) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql<{ order: string; settlement: string }>`
        SELECT o.status AS order, s.status AS settlement FROM orders o JOIN settlements s ON s.order_id = o.id
        WHERE o.id = ${orderId}`
    ).pipe(Effect.map((rows) => rows[0]))

  it.effect("a live owner's settlement is left alone; once its heartbeat is stale it is taken over", () =>
    Effect.gen(function* () {
      const merchant = yield* Merchant
      yield* heartbeat("alive", 1)
      yield* heartbeat("dead", 60)
      const alive = yield* abandonedBy("alive")
      const dead = yield* abandonedBy("dead")
      const unknown = yield* abandonedBy("never-heartbeat")

      yield* merchant.reconcile
      // No transaction was recorded, so none was sent: the orders are open again.
      expect(yield* stateOf(dead)).toEqual({ order: "open", settlement: "failed" })
      expect(yield* stateOf(unknown)).toEqual({ order: "open", settlement: "failed" })
      expect(yield* stateOf(alive)).toEqual({ order: "settling", settlement: "pending" })

      yield* heartbeat("alive", 7)
      yield* merchant.reconcile
      expect(yield* stateOf(alive)).toEqual({ order: "open", settlement: "failed" })
    }).pipe(Effect.orDie)
  )

  it.effect("this replica's own settlement is judged only by a working set taken after it was reserved", () =>
    Effect.gen(function* () {
      const repo = yield* OrderRepo
      const settling = yield* abandonedBy("this-replica")
      const abandoned = (working: ReadonlyArray<string>, workingAt: Date) =>
        repo
          .claimAbandoned({ replica: "this-replica", working, workingAt, leaseSeconds: 6, limit: 20 })
          .pipe(Effect.map((rows) => rows.map((row) => row.orderId)))
      const minuteAgo = new Date(Date.now() - 60_000)
      const inAMinute = new Date(Date.now() + 60_000)
      // A working set taken before the reservation cannot hold it: its request may still run.
      expect(yield* abandoned([], minuteAgo)).not.toContain(settling)
      expect(yield* abandoned([settling], inAMinute)).not.toContain(settling)
      expect(yield* abandoned([], inAMinute)).toContain(settling)
    }).pipe(Effect.orDie)
  )
})
