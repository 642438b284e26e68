/** SQL for orders and their settlements. Infrastructure failures die here. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Array as Arr, Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { isUniqueViolation, repository, transactionally } from "../storage/Sql.js"
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

    /**
     * The order, with a due expiry applied first (an open order past `expires_at` becomes expired:
     * idempotent, safe to race), in one statement. The outer SELECT sees the row as it was before
     * the statement, so an order expired by it comes from the UPDATE's RETURNING (`justExpired`).
     */
    const loadOrder = SqlSchema.findOne({
      Request: Schema.Struct({ id: Schema.String, now: Schema.DateFromSelf }),
      Result: Schema.Struct({ ...OrderRow.fields, justExpired: Schema.Boolean }),
      execute: ({ id, now }) =>
        sql`WITH expired AS (
              UPDATE orders SET status = 'expired'
              WHERE id = ${id} AND status = 'open' AND expires_at <= ${now}
              RETURNING *
            )
            SELECT *, true AS just_expired FROM expired
            UNION ALL
            SELECT *, false AS just_expired FROM orders WHERE id = ${id} AND NOT EXISTS (SELECT 1 FROM expired)`
    })

    /**
     * The exactly-once gate: an open order becomes settling and gets its pending settlement, owned
     * by `owner`, in one statement. A concurrent reservation waits for the row lock and then finds
     * the order no longer open. Answers the new settlement's id, or none and the order's status as
     * the statement found it ("open" then means another reservation took it meanwhile; null: no
     * such order). A second use of the authorization is `DuplicateAuthorization`, nothing changed.
     *
     * With the payer's `balance` (read while verifying), the payer's other unsettled payments of the
     * same asset count against it: the order is reserved only when what they leave covers
     * `amountAtomic`, else `Overdrawn` (nothing changed). The payer's reservations take turns (a
     * transaction-scoped advisory lock per payer and asset), so concurrent payments from one payer
     * each see the others' committed reservations.
     */
    const reserve = (row: {
      readonly orderId: string
      readonly payer: string
      readonly asset: string
      readonly balance: bigint | null
      readonly nonce: string
      readonly amountAtomic: bigint
      readonly validBefore: bigint
      readonly payload: PaymentPayload
      readonly owner: string
      readonly now: Date
    }) =>
      Effect.gen(function* () {
        const asset = row.asset.toLowerCase()
        if (row.balance !== null) {
          yield* sql`SELECT pg_advisory_xact_lock(hashtextextended(${`reserve:${row.payer.toLowerCase()}:${asset}`}, 0))`
        }
        const [result] = yield* sql<{
          settlementId: string | null
          status: OrderStatus | null
          overdrawn: boolean
        }>`
          WITH committed AS (
            SELECT COALESCE(sum(amount_atomic), 0) AS amount FROM settlements
            WHERE payer = ${row.payer} AND status IN ('pending', 'broadcast')
              AND lower(payload->'accepted'->>'asset') = ${asset}
          ), covered AS (
            SELECT ${row.balance?.toString() ?? null}::numeric IS NULL
                OR ${row.balance?.toString() ?? null}::numeric - amount >= ${row.amountAtomic.toString()}::numeric AS ok
            FROM committed
          ), moved AS (
            UPDATE orders SET status = 'settling'
            WHERE id = ${row.orderId} AND status = 'open' AND (SELECT ok FROM covered)
            RETURNING id
          ), settlement AS (
            INSERT INTO settlements
              (order_id, payer, nonce, amount_atomic, valid_before, payload, status, owner, created_at, updated_at)
            SELECT id, ${row.payer}, ${row.nonce}, ${row.amountAtomic.toString()}, ${row.validBefore.toString()},
                   ${JSON.stringify(row.payload)}::jsonb, 'pending', ${row.owner}, ${row.now}, ${row.now}
            FROM moved
            RETURNING id
          )
          SELECT (SELECT id FROM settlement) AS settlement_id,
                 (SELECT status FROM orders WHERE id = ${row.orderId}) AS status,
                 NOT (SELECT ok FROM covered) AS overdrawn`
        if (result?.settlementId != null) {
          return { _tag: "Reserved" as const, settlementId: Number(result.settlementId) }
        }
        return result?.status === "open" && result.overdrawn
          ? { _tag: "Overdrawn" as const }
          : { _tag: "Refused" as const, status: result?.status ?? null }
      }).pipe(
        sql.withTransaction,
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

    /**
     * Moves an unfinished settlement to a final state and its order with it, in one statement:
     * succeeded pays the settling order (payer, transaction, time), failed reopens it. Idempotent: a
     * settlement already final changes nothing. Answers the order as this call left it, none when
     * the outcome was recorded before.
     */
    const finishSettlement = (
      id: number,
      outcome:
        | { readonly status: "succeeded"; readonly txHash: string }
        | { readonly status: "failed"; readonly txHash: string | null; readonly errorReason: string },
      now: Date
    ) =>
      (outcome.status === "succeeded"
        ? sql`WITH done AS (
                UPDATE settlements SET status = 'succeeded', tx_hash = ${outcome.txHash}, error_reason = NULL,
                       updated_at = ${now}
                WHERE id = ${id} AND status IN ('pending', 'broadcast')
                RETURNING order_id, payer
              )
              UPDATE orders o SET status = 'paid', payer = done.payer, tx = ${outcome.txHash}, paid_at = ${now}
              FROM done WHERE o.id = done.order_id AND o.status = 'settling'
              RETURNING o.*`
        : sql`WITH done AS (
                UPDATE settlements SET status = 'failed', tx_hash = COALESCE(${outcome.txHash}, tx_hash),
                       error_reason = ${outcome.errorReason}, updated_at = ${now}
                WHERE id = ${id} AND status IN ('pending', 'broadcast')
                RETURNING order_id
              )
              UPDATE orders o SET status = 'open' FROM done WHERE o.id = done.order_id AND o.status = 'settling'
              RETURNING o.*`
      ).pipe(
        Effect.flatMap((rows) => Schema.decodeUnknown(Schema.Array(OrderRow))(rows)),
        Effect.map(Arr.head)
      )

    /** This replica is alive (database time, so replicas' clocks need not agree); forgets long-dead ones. */
    const heartbeat = (replica: string) =>
      sql`INSERT INTO merchant_replicas (id, heartbeat_at) VALUES (${replica}, now())
          ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`.pipe(
        Effect.zipRight(sql`DELETE FROM merchant_replicas WHERE heartbeat_at < now() - interval '1 day'`)
      )

    /**
     * Unfinished settlements nobody works on, locked (other replicas skip them): no owner, an owner
     * whose heartbeat is older than `leaseSeconds` (dead), or this replica itself for an order it is
     * no longer `working` on (the settling fiber ended without a final state). `working` is what
     * this replica worked on at `workingAt`: its settlements reserved since are not judged by it.
     */
    const lockAbandoned = SqlSchema.findAll({
      Request: Schema.Struct({
        replica: Schema.String,
        working: Schema.Array(Schema.String),
        workingAt: Schema.DateFromSelf,
        leaseSeconds: Schema.Number,
        limit: Schema.Number
      }),
      Result: SettlementRow,
      execute: ({ replica, working, workingAt, leaseSeconds, limit }) =>
        sql`SELECT s.* FROM settlements s
            WHERE s.status IN ('pending', 'broadcast')
              AND (CASE WHEN s.owner = ${replica}
                     THEN s.created_at < ${workingAt} AND NOT (s.order_id = ANY(${working}::text[]))
                     ELSE s.owner IS NULL OR NOT EXISTS (
                       SELECT 1 FROM merchant_replicas r
                       WHERE r.id = s.owner AND r.heartbeat_at > now() - make_interval(secs => ${leaseSeconds}))
                   END)
            ORDER BY s.updated_at LIMIT ${limit} FOR UPDATE OF s SKIP LOCKED`
    })

    return {
      ...repository("OrderRepo", {
        insertOrder,
        loadOrder,
        reserve,
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
