/**
 * The card statement: settled merchant orders the card paid and the agent's executed refills (the
 * USD1 its send transaction moved to the card), newest first, with a cursor. Read-only over the
 * tables that own those facts.
 */

import { SqlClient, SqlSchema, type Statement as SqlStatement } from "@effect/sql"
import { Clock, Effect, Option, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { DEFAULT_PAGE_SIZE } from "../http/QueryParams.js"
import { traced } from "../observability/Traced.js"
import { ActivityItem, CardActivityItem, type StatementItem } from "./Api.js"

const ItemRow = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("payment", "refill"),
  at: Schema.DateFromSelf,
  amountMicros: Schema.BigInt,
  description: Schema.String,
  tx: Schema.String
})

/** Any statement row: the card network's items carry a status and a merchant, and a transaction only once on chain. */
const StatementRow = Schema.Struct({
  ...ItemRow.fields,
  type: Schema.Literal("payment", "refill", "card_payment", "card_refund"),
  tx: Schema.NullOr(Schema.String),
  status: Schema.NullOr(Schema.Literal("pending", "settled", "reversed", "expired")),
  merchantMcc: Schema.NullOr(Schema.String),
  merchantCity: Schema.NullOr(Schema.String),
  merchantCountry: Schema.NullOr(Schema.String)
})
type StatementRow = typeof StatementRow.Type

const statementItem = (row: StatementRow): StatementItem =>
  row.type === "payment" || row.type === "refill"
    ? activityItem({ ...row, type: row.type, tx: row.tx ?? "" })
    : new CardActivityItem({
        id: row.id,
        type: row.type,
        at: row.at.getTime(),
        usd: Number(row.amountMicros) / 1_000_000,
        description: row.description,
        status: row.status ?? "pending",
        merchant: {
          name: row.description,
          categoryCode: row.merchantMcc ?? "0000",
          city: row.merchantCity,
          country: row.merchantCountry ?? ""
        },
        ...(row.tx === null ? {} : { tx: row.tx })
      })

/** A statement item from its stored facts; USD amounts are kept in millionths. */
export const activityItem = (row: {
  readonly id: string
  readonly type: "payment" | "refill"
  readonly at: Date
  readonly amountMicros: bigint
  readonly description: string
  readonly tx: string
}) =>
  new ActivityItem({
    id: row.id,
    type: row.type,
    at: row.at.getTime(),
    usd: Number(row.amountMicros) / 1_000_000,
    description: row.description,
    tx: row.tx
  })

/** A payment of the card's: a merchant order, or a card-network payment (`card`). */
export interface CardPayment {
  readonly at: number
  readonly usd: number
  readonly card: boolean
}

export class Statement extends Effect.Service<Statement>()("app/Statement", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    // USD1 atomic units per millionth of a dollar.
    const atomicPerMicro = (10n ** BigInt(Math.max(0, (yield* ChainClient).usd1.decimals - 6))).toString()

    /** The executed refills that `where` selects (over decisions `d` and cards `c`), as items. */
    const refills = (where: SqlStatement.Fragment) => sql`
      SELECT 'refill-' || d.id AS id, 'refill' AS type, t.updated_at AS at,
             (t.amount / ${atomicPerMicro}::numeric)::bigint AS amount_micros,
             CASE WHEN d.symbol = 'USD1' THEN 'Agent refill from the agent wallet''s USD1'
                  ELSE 'Agent refill: sold ' || d.symbol END AS description,
             t.hash AS tx, c.address AS owner
      FROM agent_decisions d
      JOIN cards c ON c.id = d.card_id
      JOIN agent_transactions t ON t.decision_id = d.id AND t.step = 'send' AND t.status = 'succeeded'
      WHERE d.action = 'refill' AND d.status = 'executed' AND ${where}`

    const page = SqlSchema.findAll({
      Request: Schema.Struct({
        address: Schema.String,
        limit: Schema.Number,
        before: Schema.NullOr(Schema.String),
        now: Schema.DateFromSelf
      }),
      Result: StatementRow,
      // A cursor that is not one of the caller's items yields an empty page, never another's data.
      // A card payment shows what was cleared once cleared, else what it stands for (a reversed one:
      // what was asked, released since); a hold past its
      // expiry (CARD_HOLD_TTL) that nothing cleared has expired. Its transaction is the settlement
      // account's last settled transfer for it: the debit of its clearing (a refund's: its credit).
      execute: ({ address, limit, before, now }) => sql`
        WITH items AS (
          SELECT id, 'payment' AS type, paid_at AS at, amount_micros, description, tx,
                 NULL AS status, NULL AS merchant_mcc, NULL AS merchant_city, NULL AS merchant_country
          FROM orders WHERE payer = ${address} AND status = 'paid'
          UNION ALL
          SELECT id, type, at, amount_micros, description, tx, NULL, NULL, NULL, NULL
          FROM (${refills(sql`c.address = ${address}`)}) r
          UNION ALL
          SELECT 'card-' || id, 'card_payment', created_at,
                 CASE WHEN cleared_micros > 0 THEN cleared_micros WHEN status = 'reversed' THEN requested_micros
                      ELSE approved_micros END,
                 merchant_name,
                 (SELECT t.mined_hash FROM card_network_events e JOIN card_program_transfers t ON t.event_id = e.id
                  WHERE e.authorization_id = a.id AND t.settled_at IS NOT NULL ORDER BY t.seq DESC LIMIT 1),
                 CASE WHEN status = 'pending' AND cleared_micros = 0 AND hold_expires_at <= ${now} THEN 'expired'
                      ELSE status END,
                 merchant_mcc, merchant_city, merchant_country
          FROM card_authorizations a WHERE address = ${address} AND approved
          UNION ALL
          SELECT CASE kind WHEN 'refund' THEN 'card-refund-' ELSE 'card-post-' END || id,
                 CASE kind WHEN 'refund' THEN 'card_refund' ELSE 'card_payment' END, created_at, amount_micros,
                 merchant_name,
                 (SELECT t.mined_hash FROM card_program_transfers t WHERE t.event_id = e.id AND t.settled_at IS NOT NULL),
                 CASE WHEN money IN ('debited', 'credited') THEN 'settled' ELSE 'pending' END,
                 merchant_mcc, merchant_city, merchant_country
          FROM card_network_events e
          WHERE address = ${address} AND (kind = 'refund' OR (kind = 'clearing' AND authorization_id IS NULL))
        ),
        cursor AS (SELECT at, id FROM items WHERE id = ${before})
        SELECT items.* FROM items
        WHERE ${before}::text IS NULL OR (items.at, items.id) < (SELECT at, id FROM cursor)
        ORDER BY items.at DESC, items.id DESC
        LIMIT ${limit}`
    })

    const activity = traced("Statement.activity")(function* (
      address: Address,
      query: { readonly limit?: number; readonly before?: string }
    ) {
      const rows = yield* page({
        address,
        limit: query.limit ?? DEFAULT_PAGE_SIZE,
        before: query.before ?? null,
        now: new Date(yield* Clock.currentTimeMillis)
      }).pipe(Effect.orDie)
      return rows.map(statementItem)
    })

    const refillRow = SqlSchema.findOne({
      Request: Schema.String,
      Result: Schema.Struct({ ...ItemRow.fields, owner: Address }),
      execute: (decisionId) => sql`${refills(sql`d.id = ${decisionId}::bigint`)}`
    })

    /** An executed refill's statement item and whose card it went to; none unless executed. */
    const refill = traced("Statement.refill")(function* (decisionId: string) {
      const row = yield* refillRow(decisionId).pipe(Effect.orDie)
      return Option.map(row, (found) => ({ owner: found.owner, item: activityItem(found) }))
    })

    const paymentRows = SqlSchema.findAll({
      Request: Schema.Struct({ addresses: Schema.Array(Schema.String), since: Schema.DateFromSelf }),
      Result: Schema.Struct({
        payer: Schema.String,
        paidAt: Schema.DateFromSelf,
        amountMicros: Schema.BigInt,
        card: Schema.Boolean
      }),
      // A card-network payment counts as approved, when approved (its clearing moves the money later).
      // Read card by card through the (card_id, created_at) index of approved ones: the lookback only.
      execute: ({ addresses, since }) => sql`
        SELECT payer, paid_at, amount_micros, false AS card FROM orders
        WHERE status = 'paid' AND payer IN ${sql.in(addresses)} AND paid_at >= ${since}
        UNION ALL
        SELECT c.address, a.created_at, a.approved_micros, true FROM cards c
        CROSS JOIN LATERAL (
          SELECT created_at, approved_micros FROM card_authorizations
          WHERE card_id = c.id AND approved AND created_at >= ${since}
        ) a
        WHERE c.address IN ${sql.in(addresses)}`
    })

    /**
     * The payments of each card since `since`, in one query: the agent's spending history. The
     * merchant orders it paid, and its approved card-network authorizations (`card`), each at its amount.
     */
    const payments = traced("Statement.payments")(function* (addresses: ReadonlyArray<Address>, since: number) {
      const byPayer = new Map<string, Array<CardPayment>>(addresses.map((address) => [address, []]))
      if (addresses.length === 0) return byPayer
      const rows = yield* paymentRows({ addresses, since: new Date(since) }).pipe(Effect.orDie)
      for (const row of rows) {
        byPayer
          .get(row.payer)
          ?.push({ at: row.paidAt.getTime(), usd: Number(row.amountMicros) / 1_000_000, card: row.card })
      }
      return byPayer as ReadonlyMap<string, ReadonlyArray<CardPayment>>
    })

    return { activity, refill, payments }
  })
}) {}
