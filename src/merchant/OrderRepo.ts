/** SQL for orders and their settlements. Infrastructure failures die here. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { isUniqueViolation, repository, transactionally } from "../Sql.js"
import { OrderStatus } from "./Api.js"
import { PaymentPayload } from "./X402.js"

export const OrderRow = Schema.Struct({
  id: Schema.String,
  amount: Schema.String,
  amountMicros: Schema.BigInt,
  description: Schema.String,
  status: OrderStatus,
  createdAt: Schema.DateFromSelf,
  expiresAt: Schema.DateFromSelf,
  payer: Schema.NullOr(Address),
  tx: Schema.NullOr(Schema.String),
  paidAt: Schema.NullOr(Schema.DateFromSelf)
})
export type OrderRow = typeof OrderRow.Type

const SettlementStatus = Schema.Literal("pending", "broadcast", "succeeded", "failed")

export const SettlementRow = Schema.Struct({
  id: Schema.NumberFromString,
  orderId: Schema.String,
  payer: Address,
  nonce: Schema.String,
  amountAtomic: Schema.BigInt,
  validBefore: Schema.BigInt,
  payload: PaymentPayload,
  status: SettlementStatus,
  txHash: Schema.NullOr(Schema.String),
  rawTx: Schema.NullOr(Schema.String),
  errorReason: Schema.NullOr(Schema.String),
  owner: Schema.NullOr(Schema.String),
  updatedAt: Schema.DateFromSelf
})
export type SettlementRow = typeof SettlementRow.Type

export class DuplicateAuthorization extends Schema.TaggedError<DuplicateAuthorization>()(
  "DuplicateAuthorization",
  {}
) {}

export class OrderRepo extends Effect.Service<OrderRepo>()("app/OrderRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const insertOrder = SqlSchema.void({
      // A new order has no payer, transaction or payment time yet.
      Request: OrderRow.pipe(Schema.omit("payer", "tx", "paidAt")),
      execute: (row) => sql`INSERT INTO orders ${sql.insert(row)}`
    })

    const findOrder = SqlSchema.findOne({
      Request: Schema.String,
      Result: OrderRow,
      execute: (id) => sql`SELECT * FROM orders WHERE id = ${id}`
    })

    /** Locks the order row for the rest of the transaction. */
    const lockOrder = SqlSchema.findOne({
      Request: Schema.String,
      Result: OrderRow,
      execute: (id) => sql`SELECT * FROM orders WHERE id = ${id} FOR UPDATE`
    })

    /** An open order past its expiry becomes expired (idempotent, safe to race). */
    const expireIfDue = (id: string, now: Date) =>
      sql`UPDATE orders SET status = 'expired' WHERE id = ${id} AND status = 'open' AND expires_at <= ${now}`

    const setOrderStatus = (id: string, from: OrderStatus, to: OrderStatus) =>
      sql`UPDATE orders SET status = ${to} WHERE id = ${id} AND status = ${from}`

    const markOrderPaid = (id: string, payer: string, tx: string, paidAt: Date) =>
      sql`UPDATE orders SET status = 'paid', payer = ${payer}, tx = ${tx}, paid_at = ${paidAt}
          WHERE id = ${id} AND status = 'settling'`

    const insertSettlement = (row: {
      readonly orderId: string
      readonly payer: string
      readonly nonce: string
      readonly amountAtomic: bigint
      readonly validBefore: bigint
      readonly payload: PaymentPayload
      readonly owner: string
      readonly now: Date
    }) =>
      sql<{ id: string }>`
        INSERT INTO settlements
          (order_id, payer, nonce, amount_atomic, valid_before, payload, status, owner, created_at, updated_at)
        VALUES (${row.orderId}, ${row.payer}, ${row.nonce}, ${row.amountAtomic.toString()}, ${row.validBefore.toString()},
                ${JSON.stringify(row.payload)}::jsonb, 'pending', ${row.owner}, ${row.now}, ${row.now})
        RETURNING id`.pipe(
        Effect.map((rows) => Number(rows[0]!.id)),
        Effect.catchIf(
          (error) => isUniqueViolation(error, "settlements_payer_nonce_key"),
          () => new DuplicateAuthorization()
        )
      )

    const findSucceededSettlement = SqlSchema.findOne({
      Request: Schema.String,
      Result: SettlementRow,
      execute: (orderId) => sql`SELECT * FROM settlements WHERE order_id = ${orderId} AND status = 'succeeded'`
    })

    /** Records the transaction about to be broadcast; false when the settlement was already decided. */
    const recordBroadcast = (id: number, txHash: string, rawTx: string | null, now: Date) =>
      sql`UPDATE settlements SET status = 'broadcast', tx_hash = ${txHash}, raw_tx = ${rawTx}, updated_at = ${now}
          WHERE id = ${id} AND status IN ('pending', 'broadcast')
          RETURNING id`.pipe(Effect.map((rows) => rows.length === 1))

    /** Moves an unfinished settlement to a final state; false when it was already final. */
    const finishSettlement = (
      id: number,
      status: "succeeded" | "failed",
      fields: { readonly txHash: string | null; readonly errorReason: string | null },
      now: Date
    ) =>
      sql`UPDATE settlements
          SET status = ${status}, tx_hash = COALESCE(${fields.txHash}, tx_hash), error_reason = ${fields.errorReason},
              updated_at = ${now}
          WHERE id = ${id} AND status IN ('pending', 'broadcast')
          RETURNING id`.pipe(Effect.map((rows) => rows.length === 1))

    /** This replica is alive (database time, so replicas' clocks need not agree); forgets long-dead ones. */
    const heartbeat = (replica: string) =>
      sql`INSERT INTO merchant_replicas (id, heartbeat_at) VALUES (${replica}, now())
          ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`.pipe(
        Effect.zipRight(sql`DELETE FROM merchant_replicas WHERE heartbeat_at < now() - interval '1 day'`)
      )

    /**
     * Unfinished settlements nobody works on, locked (other replicas skip them): no owner, an owner
     * whose heartbeat is older than `leaseSeconds` (dead), or this replica itself for an order it is
     * no longer `working` on (the settling fiber ended without a final state).
     */
    const lockAbandoned = SqlSchema.findAll({
      Request: Schema.Struct({
        replica: Schema.String,
        working: Schema.Array(Schema.String),
        leaseSeconds: Schema.Number,
        limit: Schema.Number
      }),
      Result: SettlementRow,
      execute: ({ replica, working, leaseSeconds, limit }) =>
        sql`SELECT s.* FROM settlements s
            WHERE s.status IN ('pending', 'broadcast')
              AND NOT (s.order_id = ANY(${working}::text[]))
              AND (s.owner IS NULL OR s.owner = ${replica} OR NOT EXISTS (
                SELECT 1 FROM merchant_replicas r
                WHERE r.id = s.owner AND r.heartbeat_at > now() - make_interval(secs => ${leaseSeconds})))
            ORDER BY s.updated_at LIMIT ${limit} FOR UPDATE OF s SKIP LOCKED`
    })

    return {
      ...repository("OrderRepo", {
        insertOrder,
        findOrder,
        lockOrder,
        expireIfDue,
        setOrderStatus,
        markOrderPaid,
        insertSettlement,
        findSucceededSettlement,
        recordBroadcast,
        finishSettlement,
        heartbeat,
        lockAbandoned
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}
