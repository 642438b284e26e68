/**
 * SQL for orders and their settlements. Infrastructure failures die here. One unit because the
 * exactly-once rules live in the statements together (the order's row lock, the one live
 * settlement per order, the one use per authorization, the relayer's journal of transactions);
 * split by caller, each half would restate the others' invariants.
 */
import { SqlClient, type SqlError, SqlSchema, type Statement } from "@effect/sql"
import { Array as Arr, Effect, Request, RequestResolver, Schema } from "effect"
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

/** Built once: a schema made per call compiles its decoder per call (~25 µs a time). */
const decodeOrderRows = Schema.decodeUnknown(Schema.Array(OrderRow))

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

/** What `recordBroadcast` found: recorded, the settlement already decided, or the nonce held by another. */
type Recorded = "recorded" | "decided" | "nonceTaken"

/** A settlement's transaction to record before its broadcast (`OrderRepo.recordBroadcast`). */
interface RecordBroadcast extends Request.Request<Recorded, SqlError.SqlError> {
  readonly _tag: "RecordBroadcast"
  readonly id: number
  readonly tx: {
    readonly hash: string
    readonly raw: string | null
    readonly relayed: { readonly sender: string; readonly nonce: number } | null
  }
  readonly now: Date
}
const RecordBroadcast = Request.tagged<RecordBroadcast>("RecordBroadcast")

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
     * idempotent, safe to race), in one statement: the CTEs `expired` and `found`. The outer SELECT
     * sees the row as it was before the statement, so an order expired by it comes from the UPDATE's
     * RETURNING (`justExpired`).
     */
    const orderDue = (id: string, now: Date) =>
      sql`expired AS (
            UPDATE orders SET status = 'expired'
            WHERE id = ${id} AND status = 'open' AND expires_at <= ${now}
            RETURNING *
          ), found AS (
            SELECT *, true AS just_expired FROM expired
            UNION ALL
            SELECT *, false AS just_expired FROM orders WHERE id = ${id} AND NOT EXISTS (SELECT 1 FROM expired)
          )`
    const OrderLoaded = Schema.Struct({ ...OrderRow.fields, justExpired: Schema.Boolean })

    /**
     * The order as `orderDue` has it. Most reads find it not due: a plain SELECT, which PostgreSQL
     * runs for a fraction of the expiry statement's cost; the expiry statement runs only for an open
     * order past its expiry (and decides, as always, whether this read expired it).
     */
    const loadOrder = SqlSchema.findOne({
      Request: Schema.Struct({ id: Schema.String, now: Schema.DateFromSelf }),
      Result: OrderLoaded,
      execute: ({ id, now }) =>
        sql<{ readonly status: string; readonly expiresAt: Date }>`
          SELECT *, false AS just_expired FROM orders WHERE id = ${id}`.pipe(
          Effect.flatMap((rows) =>
            rows[0]?.status === "open" && rows[0].expiresAt <= now
              ? sql`WITH ${orderDue(id, now)} SELECT * FROM found`
              : Effect.succeed(rows)
          )
        )
    })

    /**
     * The payer's settlements of the asset as they stand (`payerSettlements`): the newest one's id
     * (0 before any), how many are unsettled (`pending`, `broadcast`) and their amount. Where the
     * balance is counted (the relayer's payments), a payer's reservations take turns (`reserve`),
     * so their ids grow in the order they commit: an unchanged newest id means none was added.
     * Through indexes (migration 0019): a read costs the same whatever the payer's history.
     */
    const payerSettlements = (payer: string, asset: string) =>
      sql`SELECT (SELECT COALESCE(max(id), 0) FROM settlements
                  WHERE payer = ${payer} AND lower(payload->'accepted'->>'asset') = ${asset})::text AS newest,
                 (SELECT count(*) FROM settlements
                  WHERE payer = ${payer} AND status IN ('pending', 'broadcast')
                    AND lower(payload->'accepted'->>'asset') = ${asset})::int AS unsettled,
                 (SELECT COALESCE(sum(amount_atomic), 0) FROM settlements
                  WHERE payer = ${payer} AND status IN ('pending', 'broadcast')
                    AND lower(payload->'accepted'->>'asset') = ${asset}) AS unsettled_amount`

    /**
     * The order as `loadOrder` has it, with the payer's settlements of the asset as they stand
     * (`payerSettlements`); one statement. Read before a payment is verified, compared with what
     * its reservation finds (see `Merchant.pay`).
     */
    const loadOrderForPayer = SqlSchema.findOne({
      Request: Schema.Struct({
        id: Schema.String,
        now: Schema.DateFromSelf,
        payer: Schema.String,
        asset: Schema.String
      }),
      Result: Schema.Struct({ ...OrderLoaded.fields, newest: Schema.NumberFromString, unsettled: Schema.Number }),
      execute: ({ id, now, payer, asset }) =>
        sql`WITH ${orderDue(id, now)}
            SELECT found.*, counted.newest, counted.unsettled
            FROM found CROSS JOIN (${payerSettlements(payer, asset.toLowerCase())}) counted`
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
          othersNewest: string
          othersUnsettled: number
        }>`
          WITH committed AS (${payerSettlements(row.payer, asset)}), covered AS (
            SELECT ${row.balance?.toString() ?? null}::numeric IS NULL
                OR ${row.balance?.toString() ?? null}::numeric - unsettled_amount >= ${row.amountAtomic.toString()}::numeric
                AS ok
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
                 NOT (SELECT ok FROM covered) AS overdrawn,
                 (SELECT newest FROM committed) AS others_newest,
                 (SELECT unsettled FROM committed) AS others_unsettled`
        if (result?.settlementId != null) {
          return {
            _tag: "Reserved" as const,
            settlementId: Number(result.settlementId),
            others: { newest: Number(result.othersNewest), unsettled: result.othersUnsettled }
          }
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

    /** Another live transaction of the sender holds the nonce: nothing recorded. */
    const nonceTaken = <A>(recording: Effect.Effect<A, SqlError.SqlError>) =>
      Effect.catchIf(
        recording,
        (error) => isUniqueViolation(error, "relayed_one_per_nonce"),
        () => Effect.succeed("nonceTaken" as const)
      )

    /**
     * One journal entry, one statement (atomic on its own). The INSERT reads `replaced`, so the
     * settlement's previous live transaction is marked before the new one meets the unique indexes
     * (one live transaction per settlement and per nonce).
     */
    const recordOne = ({ id, tx, now }: RecordBroadcast): Effect.Effect<Recorded, SqlError.SqlError> =>
      (tx.raw === null || tx.relayed === null
        ? sql<{
            readonly id: number
          }>`UPDATE settlements SET status = 'broadcast', tx_hash = ${tx.hash}, raw_tx = ${tx.raw},
                                         updated_at = ${now}
                                       WHERE id = ${id} AND status IN ('pending', 'broadcast')
                                       RETURNING id`
        : sql<{ readonly id: number }>`
            WITH moved AS (
              UPDATE settlements SET status = 'broadcast', tx_hash = ${tx.hash}, raw_tx = ${tx.raw}, updated_at = ${now}
              WHERE id = ${id} AND status IN ('pending', 'broadcast')
              RETURNING id
            ), replaced AS (
              UPDATE relayed_transactions SET status = 'replaced', checked_at = ${now}
              WHERE settlement_id IN (SELECT id FROM moved) AND status IN ('pending', 'mined', 'bumped')
                AND tx_hash <> ${tx.hash}
              RETURNING 1
            ), journaled AS (
              INSERT INTO relayed_transactions
                (tx_hash, settlement_id, sender, nonce, raw_tx, status, created_at, checked_at)
              SELECT ${tx.hash}, id, ${tx.relayed.sender}, ${tx.relayed.nonce}, ${tx.raw}, 'pending', ${now}, ${now}
              FROM moved WHERE (SELECT count(*) FROM replaced) >= 0
              ON CONFLICT (tx_hash) DO NOTHING
              RETURNING 1
            )
            SELECT id FROM moved`
      ).pipe(
        Effect.map((moved) => (moved.length === 0 ? "decided" : "recorded")),
        nonceTaken
      )

    /**
     * Several relayed entries (distinct settlements), as `recordOne` does each, in ONE statement: one
     * round trip and one commit for a batch of the relayer's sends. Answers the settlements moved.
     */
    const recordMany = (requests: ReadonlyArray<RecordBroadcast>) =>
      sql<{ readonly id: string }>`
        WITH input AS (
          SELECT * FROM jsonb_to_recordset(${JSON.stringify(
            requests.map(({ id, tx, now }) => ({
              id,
              tx_hash: tx.hash,
              raw_tx: tx.raw,
              sender: tx.relayed?.sender,
              nonce: tx.relayed?.nonce,
              at: now
            }))
          )}::jsonb) AS i(id bigint, tx_hash text, raw_tx text, sender text, nonce bigint, at timestamptz)
        ), moved AS (
          UPDATE settlements s SET status = 'broadcast', tx_hash = i.tx_hash, raw_tx = i.raw_tx, updated_at = i.at
          FROM input i
          WHERE s.id = i.id AND s.status IN ('pending', 'broadcast')
          RETURNING s.id, i.tx_hash, i.raw_tx, i.sender, i.nonce, i.at
        ), replaced AS (
          UPDATE relayed_transactions t SET status = 'replaced', checked_at = m.at
          FROM moved m
          WHERE t.settlement_id = m.id AND t.status IN ('pending', 'mined', 'bumped') AND t.tx_hash <> m.tx_hash
          RETURNING 1
        ), journaled AS (
          INSERT INTO relayed_transactions
            (tx_hash, settlement_id, sender, nonce, raw_tx, status, created_at, checked_at)
          SELECT tx_hash, id, sender, nonce, raw_tx, 'pending', at, at
          FROM moved WHERE (SELECT count(*) FROM replaced) >= 0
          ON CONFLICT (tx_hash) DO NOTHING
          RETURNING 1
        )
        SELECT id::text AS id FROM moved`.pipe(Effect.map((moved) => new Set(moved.map((row) => Number(row.id)))))

    /**
     * The journal's group commit: the entries asked for together (the relayer journals the sends
     * waiting on one key's queue as one batch) are written in one statement. A batch it cannot
     * take whole (a facilitator's entry, a settlement twice, a nonce already held) is written an
     * entry at a time, so that each gets its own answer; a failure of the statement is every entry's.
     */
    const journal = RequestResolver.makeBatched((requests: Arr.NonEmptyArray<RecordBroadcast>) => {
      const oneByOne = Effect.forEach(requests, (request) => Request.completeEffect(request, recordOne(request)), {
        discard: true
      })
      const whole =
        requests.length > 1 &&
        requests.every((request) => request.tx.raw !== null && request.tx.relayed !== null) &&
        new Set(requests.map((request) => request.id)).size === requests.length
      if (!whole) return oneByOne
      return recordMany(requests).pipe(
        Effect.flatMap((moved) =>
          Effect.forEach(
            requests,
            (request) => Request.succeed(request, moved.has(request.id) ? "recorded" : "decided"),
            { discard: true }
          )
        ),
        Effect.catchIf(
          (error) => isUniqueViolation(error, "relayed_one_per_nonce"),
          () => oneByOne
        ),
        Effect.catchAll((error) =>
          Effect.forEach(requests, (request) => Request.fail(request, error), { discard: true })
        )
      )
    })

    /**
     * Records the transaction about to be broadcast, and journals a relayer's signed one (the one it
     * replaces, if any, is marked so): "recorded", "decided" when the settlement was already decided,
     * or "nonceTaken" when another live transaction of the sender holds the nonce (nothing recorded).
     * Entries asked for in one batched `Effect.forEach` are written together (`journal`).
     */
    const recordBroadcast = (id: number, tx: RecordBroadcast["tx"], now: Date) =>
      Effect.request(RecordBroadcast({ id, tx, now }), journal)

    /**
     * Journals a fee bump of the live transaction `previous` (the same settlement and nonce, a higher
     * fee) before it is broadcast: `previous` becomes `bumped` (it may still be mined) and the new
     * signature the live row, also the settlement's transaction. "decided" when `previous` is no
     * longer live and pending or the settlement left `broadcast` (mined meanwhile): nothing recorded.
     */
    const recordBump = (
      id: number,
      previous: string,
      tx: { readonly hash: string; readonly raw: string; readonly sender: string; readonly nonce: number },
      now: Date
    ) =>
      Effect.gen(function* () {
        const moved = yield* sql`UPDATE settlements SET tx_hash = ${tx.hash}, raw_tx = ${tx.raw}, updated_at = ${now}
                                 WHERE id = ${id} AND status = 'broadcast' RETURNING id`
        const superseded = yield* sql`UPDATE relayed_transactions SET status = 'bumped', checked_at = ${now}
                                      WHERE tx_hash = ${previous} AND settlement_id = ${id} AND status = 'pending'
                                      RETURNING tx_hash`
        if (moved.length === 0 || superseded.length === 0) return yield* Effect.fail("decided" as const)
        yield* sql`INSERT INTO relayed_transactions
                     (tx_hash, settlement_id, sender, nonce, raw_tx, status, created_at, checked_at)
                   VALUES (${tx.hash}, ${id}, ${tx.sender}, ${tx.nonce}, ${tx.raw}, 'pending', ${now}, ${now})`
        return "recorded" as const
      }).pipe(
        sql.withTransaction,
        Effect.catchIf(
          (error) => error === "decided",
          () => Effect.succeed("decided" as const)
        )
      )

    /**
     * A version of the live transaction `live` was mined (`mined`, one of its `bumped` rows): it
     * becomes the live row (pending, for `markTransaction`) and the settlement's transaction while
     * that is not decided; `live` becomes a `bumped` version. Idempotent.
     */
    const promoteVersion = (live: string, mined: string, now: Date) =>
      Effect.gen(function* () {
        const demoted = yield* sql`UPDATE relayed_transactions SET status = 'bumped', block_number = NULL,
                                     block_hash = NULL, checked_at = ${now}
                                   WHERE tx_hash = ${live} AND status IN ('pending', 'mined') RETURNING tx_hash`
        if (demoted.length === 0) return
        const promoted = yield* sql`UPDATE relayed_transactions SET status = 'pending', checked_at = ${now}
                                    WHERE tx_hash = ${mined} AND status = 'bumped'
                                    RETURNING settlement_id, raw_tx`
        const row = promoted[0] as { readonly settlementId: string; readonly rawTx: string } | undefined
        if (row === undefined) return
        yield* sql`UPDATE settlements SET tx_hash = ${mined}, raw_tx = ${row.rawTx}, updated_at = ${now}
                   WHERE id = ${row.settlementId} AND status = 'broadcast'`
      }).pipe(sql.withTransaction)

    /**
     * The sender's journaled transactions from `fromNonce` up that may be sent again: live or final,
     * of a settlement still in progress or paid, whose authorization is valid at `nowSeconds`; the
     * latest signature per nonce, in nonce order. A failed settlement's transaction is never sent again.
     */
    const resendableFrom = SqlSchema.findAll({
      Request: Schema.Struct({ sender: Schema.String, fromNonce: Schema.Number, nowSeconds: Schema.Number }),
      Result: Schema.Struct({ nonce: Schema.NumberFromString, rawTx: Schema.String }),
      execute: ({ sender, fromNonce, nowSeconds }) =>
        sql`SELECT DISTINCT ON (t.nonce) t.nonce, t.raw_tx
            FROM relayed_transactions t JOIN settlements s ON s.id = t.settlement_id
            WHERE t.sender = ${sender} AND t.nonce >= ${fromNonce} AND t.status IN ('pending', 'mined', 'final')
              AND s.status IN ('broadcast', 'succeeded') AND s.valid_before > ${nowSeconds}
            ORDER BY t.nonce, t.created_at DESC`
    })

    /** The senders' transactions not final yet, least recently checked first (no lock: every change is conditional). */
    const unfinalTransactions = SqlSchema.findAll({
      Request: Schema.Struct({ senders: Schema.Array(Schema.String), limit: Schema.Number }),
      Result: Schema.Struct({
        txHash: Schema.String,
        sender: Address,
        settlementId: Schema.NumberFromString,
        rawTx: Schema.String,
        status: Schema.Literal("pending", "mined"),
        blockHash: Schema.NullOr(Schema.String),
        validBefore: Schema.BigInt,
        settlementStatus: SettlementStatus,
        orderId: Schema.String,
        payer: Address,
        nonce: Schema.String,
        amountAtomic: Schema.BigInt,
        payload: PaymentPayload,
        /** When this version was signed: a pending one older than RELAYER_STUCK_AFTER is bumped. */
        createdAt: Schema.DateFromSelf,
        /** The earlier signatures of its nonce (fee bumps), any of which may be mined instead. */
        versions: Schema.Array(Schema.String)
      }),
      execute: ({ senders, limit }) =>
        sql`SELECT t.tx_hash, t.sender, t.settlement_id, t.raw_tx, t.status, t.block_hash, s.valid_before,
                   s.status AS settlement_status, s.order_id, s.payer, s.nonce, s.amount_atomic, s.payload,
                   t.created_at,
                   ARRAY(SELECT b.tx_hash FROM relayed_transactions b
                         WHERE b.sender = t.sender AND b.nonce = t.nonce AND b.settlement_id = t.settlement_id
                           AND b.status = 'bumped' ORDER BY b.created_at DESC) AS versions
            FROM relayed_transactions t JOIN settlements s ON s.id = t.settlement_id
            WHERE t.sender IN ${sql.in(senders)} AND t.status IN ('pending', 'mined')
            ORDER BY t.checked_at LIMIT ${limit}`
    })

    /**
     * What the tracker saw of a journaled transaction still live: mined (or final) in a block, back
     * to pending (no longer on chain), or dropped (it can never be mined). Answers whether it changed.
     */
    const markTransaction = (
      txHash: string,
      seen:
        | { readonly status: "mined" | "final"; readonly blockNumber: bigint; readonly blockHash: string }
        | { readonly status: "pending" | "dropped" },
      now: Date
    ) =>
      (seen.status === "mined" || seen.status === "final"
        ? sql`UPDATE relayed_transactions SET status = ${seen.status}, block_number = ${seen.blockNumber.toString()},
                block_hash = ${seen.blockHash}, checked_at = ${now}
              WHERE tx_hash = ${txHash} AND status IN ('pending', 'mined') RETURNING tx_hash`
        : sql`UPDATE relayed_transactions SET status = ${seen.status}, block_number = NULL, block_hash = NULL,
                checked_at = ${now}
              WHERE tx_hash = ${txHash} AND status IN ('pending', 'mined') RETURNING tx_hash`
      ).pipe(Effect.map((rows) => rows.length === 1))

    /**
     * A paid order whose transfer the chain lost for good (its authorization expired unused): the
     * settlement fails with `reason` and the order is unpaid again, open or expired by its own
     * expiry. Idempotent. Answers the order as this call left it.
     */
    const undoLostSettlement = (id: number, reason: string, now: Date) =>
      sql`WITH undone AS (
            UPDATE settlements SET status = 'failed', error_reason = ${reason}, updated_at = ${now}
            WHERE id = ${id} AND status = 'succeeded'
            RETURNING order_id
          )
          UPDATE orders o SET status = CASE WHEN o.expires_at > ${now} THEN 'open' ELSE 'expired' END,
                 payer = NULL, tx = NULL, paid_at = NULL
          FROM undone WHERE o.id = undone.order_id AND o.status = 'paid'
          RETURNING o.*`.pipe(Effect.flatMap(decodeOrderRows), Effect.map(Arr.head))

    /**
     * Moves an unfinished settlement to a final state and its order with it, in one statement:
     * succeeded pays the settling order (payer, transaction, time), failed reopens it. Idempotent: a
     * settlement already final changes nothing. Answers the order as this call left it, none when
     * the outcome was recorded before. `alsoWhenPaid`: CTEs of the caller's that the same statement
     * runs (and reads, as `notified`) under the condition it is given, which holds only when this
     * call paid the order (the payer's event: `Events.publishing`).
     */
    const finishSettlement = (
      id: number,
      outcome:
        | { readonly status: "succeeded"; readonly txHash: string }
        | { readonly status: "failed"; readonly txHash: string | null; readonly errorReason: string },
      now: Date,
      alsoWhenPaid?: (paidNow: Statement.Fragment) => Statement.Fragment
    ) =>
      (outcome.status === "succeeded"
        ? sql`WITH done AS (
                UPDATE settlements SET status = 'succeeded', tx_hash = ${outcome.txHash}, error_reason = NULL,
                       updated_at = ${now}
                WHERE id = ${id} AND status IN ('pending', 'broadcast')
                RETURNING order_id, payer
              ), paid AS (
                UPDATE orders o SET status = 'paid', payer = done.payer, tx = ${outcome.txHash}, paid_at = ${now}
                FROM done WHERE o.id = done.order_id AND o.status = 'settling'
                RETURNING o.*
              )${alsoWhenPaid === undefined ? sql`` : sql`, ${alsoWhenPaid(sql`EXISTS (SELECT 1 FROM paid)`)}`}
              SELECT paid.* FROM paid${alsoWhenPaid === undefined ? sql`` : sql` LEFT JOIN (SELECT count(*) FROM notified) n ON true`}`
        : sql`WITH done AS (
                UPDATE settlements SET status = 'failed', tx_hash = COALESCE(${outcome.txHash}, tx_hash),
                       error_reason = ${outcome.errorReason}, updated_at = ${now}
                WHERE id = ${id} AND status IN ('pending', 'broadcast')
                RETURNING order_id
              )
              UPDATE orders o SET status = 'open' FROM done WHERE o.id = done.order_id AND o.status = 'settling'
              RETURNING o.*`
      ).pipe(Effect.flatMap(decodeOrderRows), Effect.map(Arr.head))

    /** This replica is alive (database time, so replicas' clocks need not agree); forgets long-dead ones. */
    const heartbeat = (replica: string) =>
      sql`INSERT INTO merchant_replicas (id, heartbeat_at) VALUES (${replica}, now())
          ON CONFLICT (id) DO UPDATE SET heartbeat_at = now()`.pipe(
        Effect.zipRight(sql`DELETE FROM merchant_replicas WHERE heartbeat_at < now() - interval '1 day'`)
      )

    /** This replica stops: with its heartbeat gone, its unfinished settlements are the others' at once. */
    const forgetReplica = (replica: string) => sql`DELETE FROM merchant_replicas WHERE id = ${replica}`

    /**
     * Unfinished settlements nobody works on, claimed for this check: no owner, an owner whose
     * heartbeat is older than `leaseSeconds` (dead), or this replica itself for an order it is no
     * longer `working` on (the settling fiber ended without a final state). `working` is what this
     * replica worked on at `workingAt`: its settlements reserved since are not judged by it.
     *
     * The least recently checked come first and are stamped `checked_at` in the same short
     * statement, so undecidable ones go to the back of the line, and no row lock is held while the
     * chain is asked (every decision after is conditional, so two replicas deciding one row agree).
     */
    const claimAbandoned = SqlSchema.findAll({
      Request: Schema.Struct({
        replica: Schema.String,
        working: Schema.Array(Schema.String),
        workingAt: Schema.DateFromSelf,
        leaseSeconds: Schema.Number,
        limit: Schema.Number
      }),
      Result: SettlementRow,
      execute: ({ replica, working, workingAt, leaseSeconds, limit }) =>
        sql`UPDATE settlements SET checked_at = ${workingAt}
            WHERE id IN (
              SELECT s.id FROM settlements s
              WHERE s.status IN ('pending', 'broadcast')
                AND (CASE WHEN s.owner = ${replica}
                       THEN s.created_at < ${workingAt} AND NOT (s.order_id = ANY(${working}::text[]))
                       ELSE s.owner IS NULL OR NOT EXISTS (
                         SELECT 1 FROM merchant_replicas r
                         WHERE r.id = s.owner AND r.heartbeat_at > now() - make_interval(secs => ${leaseSeconds}))
                     END)
              ORDER BY s.checked_at NULLS FIRST, s.updated_at LIMIT ${limit} FOR UPDATE SKIP LOCKED)
            RETURNING *`
    })

    /** Settlements unfinished (no receipt recorded) for over `seconds`: what a stuck relayer leaves. */
    const countStuckSettlements = (seconds: number) =>
      sql<{ readonly stuck: number }>`
        SELECT count(*)::int AS stuck FROM settlements
        WHERE status IN ('pending', 'broadcast') AND created_at < now() - make_interval(secs => ${seconds})`.pipe(
        Effect.map((rows) => rows[0]?.stuck ?? 0)
      )

    return {
      ...repository("OrderRepo", {
        insertOrder,
        loadOrder,
        loadOrderForPayer,
        reserve,
        findSucceededSettlement,
        recordBroadcast,
        recordBump,
        promoteVersion,
        resendableFrom,
        unfinalTransactions,
        markTransaction,
        undoLostSettlement,
        finishSettlement,
        heartbeat,
        forgetReplica,
        claimAbandoned,
        countStuckSettlements
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}
