/**
 * SQL for card authorizations. Every decision and every event runs while its card's row is locked
 * (`lockCard`, FOR UPDATE), and what it is decided on is read by a later statement of the same
 * transaction (`position`): under READ COMMITTED a statement sees what committed before it started,
 * so reading the holds in the locking statement would miss those committed while it waited for the
 * lock. Infrastructure failures die here.
 */
import { SqlClient, SqlSchema, type Statement } from "@effect/sql"
import { Effect, Option, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository, transactionally } from "../storage/Sql.js"
import { CardAuthorization } from "./Api.js"
import type { Channel, Merchant } from "./CardNetwork.js"
import type { DeclineReason } from "./Decide.js"
import type { Amounts, AuthorizationStatus } from "./Lifecycle.js"

const Micros = Schema.BigInt

/** A card as an authorization sees it, locked. */
export const LockedCard = Schema.Struct({
  id: Schema.String,
  address: Address,
  expiry: Schema.String,
  canceled: Schema.Boolean,
  frozen: Schema.Boolean,
  perTransactionMicros: Schema.NullOr(Micros),
  dailyMicros: Schema.NullOr(Micros),
  monthlyMicros: Schema.NullOr(Micros),
  blockedMcc: Schema.Array(Schema.String)
})
export type LockedCard = typeof LockedCard.Type

const StoredAuthorization = Schema.Struct({
  id: Schema.String,
  messageId: Schema.String,
  approved: Schema.Boolean,
  reason: Schema.NullOr(Schema.String),
  requestedMicros: Micros,
  approvedMicros: Micros,
  heldMicros: Micros,
  clearedMicros: Micros,
  availableAfterMicros: Schema.NullOr(Micros),
  status: Schema.Literal("declined", "pending", "settled", "reversed", "expired"),
  merchantName: Schema.String,
  merchantMcc: Schema.String,
  merchantCity: Schema.NullOr(Schema.String),
  merchantCountry: Schema.String,
  channel: Schema.Literal("in_person", "online"),
  createdAt: Schema.Date,
  holdExpiresAt: Schema.Date
})
export type StoredAuthorization = typeof StoredAuthorization.Type

/** What a decision is made on, read after the card's lock was taken. */
const Position = Schema.Struct({
  balanceMicros: Schema.NullOr(Micros),
  balanceCheckedAt: Schema.NullOr(Schema.DateFromSelf),
  heldMicros: Micros,
  clearedPendingMicros: Micros,
  spentTodayMicros: Micros,
  spentMonthMicros: Micros,
  allowanceMicros: Micros,
  allowanceCapMicros: Schema.NullOr(Micros),
  allowanceDeadline: Schema.NullOr(Schema.DateFromSelf),
  allowanceSeen: Schema.Boolean,
  allowanceForThisProgram: Schema.Boolean,
  existing: Schema.NullOr(Schema.parseJson(Schema.Unknown)),
  incrementAnswer: Schema.NullOr(Schema.parseJson(Schema.Unknown))
})

const decodeStored = Schema.decodeUnknownSync(StoredAuthorization)

/** A stored increment's answer. */
const decodeIncrement = Schema.decodeUnknownSync(
  Schema.Struct({ approved: Schema.Boolean, reason: Schema.NullOr(Schema.String) })
)

const usd = (micros: bigint) => Number(micros) / 1_000_000

/** The status a holder sees: a pending hold past its expiry, never cleared, has expired. */
const shownStatus = (row: StoredAuthorization, now: number): AuthorizationStatus =>
  row.status === "pending" && row.clearedMicros === 0n && row.holdExpiresAt.getTime() <= now ? "expired" : row.status

/** An authorization as the API answers it. */
export const authorizationItem = (row: StoredAuthorization, now: number) =>
  new CardAuthorization({
    id: row.id,
    at: row.createdAt.getTime(),
    // A declined or wholly reversed authorization shows what was asked.
    amountUsd: usd(row.approved && row.status !== "reversed" ? row.approvedMicros : row.requestedMicros),
    approved: row.approved,
    ...(row.reason === null ? {} : { reason: row.reason as DeclineReason }),
    status: shownStatus(row, now),
    heldUsd: row.holdExpiresAt.getTime() <= now ? 0 : usd(row.heldMicros),
    clearedUsd: usd(row.clearedMicros),
    availableUsd: row.availableAfterMicros === null ? null : usd(row.availableAfterMicros),
    merchant: {
      name: row.merchantName,
      categoryCode: row.merchantMcc,
      city: row.merchantCity,
      country: row.merchantCountry
    },
    channel: row.channel
  })

export interface NewAuthorization {
  readonly id: string
  readonly messageId: string
  readonly cardId: string
  readonly address: Address
  readonly network: string
  readonly approved: boolean
  readonly reason: DeclineReason | null
  readonly requestedMicros: bigint
  readonly availableAfterMicros: bigint | null
  readonly merchant: Merchant
  readonly channel: Channel
  readonly at: Date
  readonly holdExpiresAt: Date
}

export interface NetworkEventRow {
  readonly id: string
  readonly transactionId: string
  readonly authorizationId: string | null
  readonly cardId: string
  readonly address: Address
  readonly kind: "increment" | "reversal" | "clearing" | "refund" | "expiry" | "adjustment"
  readonly amountMicros: bigint
  readonly approved: boolean | null
  readonly reason: DeclineReason | null
  readonly money: "debit_pending" | "credit_pending" | null
  readonly merchant: Merchant
  readonly at: Date
}

/**
 * An authorization as one JSON text with the API's field names, so that a statement that reads
 * other things too can carry it; amounts as text (bigint), times as ISO text.
 */
const authorizationJson = (sql: SqlClient.SqlClient) => sql`json_build_object(
  'id', id, 'messageId', message_id, 'approved', approved, 'reason', reason,
  'requestedMicros', requested_micros::text, 'approvedMicros', approved_micros::text,
  'heldMicros', held_micros::text, 'clearedMicros', cleared_micros::text,
  'availableAfterMicros', available_after_micros::text, 'status', status,
  'merchantName', merchant_name, 'merchantMcc', merchant_mcc, 'merchantCity', merchant_city,
  'merchantCountry', merchant_country, 'channel', channel,
  'createdAt', created_at, 'holdExpiresAt', hold_expires_at)::text`

export class AuthorizationRepo extends Effect.Service<AuthorizationRepo>()("app/AuthorizationRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const asJson = authorizationJson(sql)
    const rowOf = (result: unknown) => decodeStored(JSON.parse((result as { row: string }).row))

    /** The card the network's token names (its current face, or one it replaced: canceled), locked. */
    const lockCard = SqlSchema.findOne({
      Request: Schema.Struct({ cardToken: Schema.String }),
      Result: LockedCard,
      execute: ({ cardToken }) => sql`
        WITH target AS (
          SELECT id AS card_id, expiry, false AS canceled FROM cards WHERE issuer_ref = ${cardToken}
          UNION ALL
          SELECT card_id, expiry, true FROM card_replaced_faces WHERE issuer_ref = ${cardToken}
          LIMIT 1
        )
        SELECT c.id, c.address, t.expiry, t.canceled, c.frozen OR c.owed_micros > 0 AS frozen,
               c.per_transaction_micros, c.daily_micros,
               c.monthly_micros, c.blocked_mcc
        FROM cards c JOIN target t ON t.card_id = c.id
        FOR UPDATE OF c`
    })

    /**
     * The locked card's funds and spending, and what was already answered to this authorization
     * or message: one statement after the lock.
     */
    const position = (input: {
      readonly card: LockedCard
      readonly authorizationId: string
      readonly messageId: string
      readonly now: Date
      readonly dayStart: Date
      readonly monthStart: Date
      /** USD1 atomic units per millionth of a dollar. */
      readonly atomicPerMicro: bigint
      /** The card program's settlement account: the spender an allowance must name to count. */
      readonly spender: string
    }) => {
      const perMicro = sql`${input.atomicPerMicro.toString()}::numeric`
      return SqlSchema.single({
        Request: Schema.Unknown,
        Result: Position,
        execute: () => sql`
          SELECT
            wallet.balance_micros,
            (SELECT checked_at FROM card_balance_follower) AS balance_checked_at,
            (SELECT coalesce(sum(held_micros), 0) FROM card_authorizations
              WHERE card_id = ${input.card.id} AND held_micros > 0 AND hold_expires_at > ${input.now}) AS held_micros,
            (SELECT coalesce(sum(amount_micros), 0) FROM card_network_events
              WHERE card_id = ${input.card.id} AND money = 'debit_pending') AS cleared_pending_micros,
            coalesce(spent.today, 0) AS spent_today_micros,
            coalesce(spent.month, 0) AS spent_month_micros,
            coalesce(wallet.allowance_micros, 0) AS allowance_micros,
            allowance.cap_micros AS allowance_cap_micros,
            allowance.deadline AS allowance_deadline,
            coalesce(allowance.seen, false) AS allowance_seen,
            coalesce(allowance.for_this_program, false) AS allowance_for_this_program,
            (SELECT ${asJson} FROM card_authorizations WHERE id = ${input.authorizationId}) AS existing,
            (SELECT json_build_object('approved', approved, 'reason', reason) FROM card_network_events
              WHERE id = ${input.messageId} AND kind = 'increment')::text AS increment_answer
          FROM (
            SELECT sum(approved_micros) FILTER (WHERE created_at >= ${input.dayStart}) AS today,
                   sum(approved_micros) AS month
            FROM card_authorizations
            WHERE card_id = ${input.card.id} AND approved AND created_at >= ${input.monthStart}
          ) spent
          LEFT JOIN LATERAL (
            SELECT div(usd1, ${perMicro})::bigint AS balance_micros, div(allowance, ${perMicro})::bigint AS allowance_micros
            FROM card_wallet_balances WHERE address = ${input.card.address}
          ) wallet ON true
          LEFT JOIN LATERAL (
            SELECT div(cap, ${perMicro})::bigint AS cap_micros, deadline, seen_at IS NOT NULL AS seen,
                   lower(spender) = lower(${input.spender}) AS for_this_program
            FROM card_allowances WHERE card_id = ${input.card.id} AND submitted_at IS NOT NULL
            ORDER BY submitted_at DESC LIMIT 1
          ) allowance ON true`
      })(undefined).pipe(
        Effect.map((row) => ({
          balance: row.balanceMicros ?? undefined,
          balanceCheckedAt: row.balanceCheckedAt?.getTime(),
          held: row.heldMicros,
          clearedPending: row.clearedPendingMicros,
          allowance: {
            signed:
              row.allowanceCapMicros === null || row.allowanceDeadline === null
                ? undefined
                : {
                    cap: row.allowanceCapMicros,
                    deadline: row.allowanceDeadline.getTime(),
                    seenOnChain: row.allowanceSeen,
                    forThisProgram: row.allowanceForThisProgram
                  },
            onChain: row.allowanceMicros
          },
          spent: { today: row.spentTodayMicros, thisMonth: row.spentMonthMicros },
          existing: row.existing === null ? Option.none() : Option.some(decodeStored(row.existing)),
          increment: row.incrementAnswer === null ? Option.none() : Option.some(decodeIncrement(row.incrementAnswer))
        }))
      )
    }

    /** `publishing` CTEs of the events of the statement (`Events.publishing`), or none. */
    type Publishing = Statement.Fragment | undefined
    const withEvents = (publishing: Publishing, statement: Statement.Fragment, result: Statement.Fragment) =>
      publishing === undefined
        ? sql`WITH changed AS (${statement}) SELECT ${result} FROM changed`
        : sql`WITH changed AS (${statement}), ${publishing} SELECT ${result} FROM changed, (SELECT count(*) FROM notified) n`

    /** Stores a decided authorization (and its event); its hold is its approved amount. */
    const insertAuthorization = (row: NewAuthorization, publishing: Publishing) =>
      withEvents(
        publishing,
        sql`INSERT INTO card_authorizations ${sql.insert({
          id: row.id,
          messageId: row.messageId,
          cardId: row.cardId,
          address: row.address,
          network: row.network,
          approved: row.approved,
          reason: row.reason,
          requestedMicros: row.requestedMicros,
          approvedMicros: row.approved ? row.requestedMicros : 0n,
          heldMicros: row.approved ? row.requestedMicros : 0n,
          availableAfterMicros: row.availableAfterMicros,
          status: row.approved ? "pending" : "declined",
          merchantName: row.merchant.name,
          merchantMcc: row.merchant.mcc,
          merchantCity: row.merchant.city,
          merchantCountry: row.merchant.country,
          channel: row.channel,
          createdAt: row.at,
          updatedAt: row.at,
          holdExpiresAt: row.holdExpiresAt
        })} RETURNING *`,
        sql`${asJson} AS row`
      ).pipe(Effect.map((rows) => rowOf(rows[0])))

    /**
     * A stand-in answer recorded after the fact: whatever the decision's own transaction did (it
     * was cut at the deadline, and may still commit), the stored answer becomes the one the network
     * was given, holding nothing for a declined stand-in.
     */
    const recordStandIn = (row: NewAuthorization, publishing: Publishing) =>
      withEvents(
        publishing,
        sql`INSERT INTO card_authorizations ${sql.insert({
          id: row.id,
          messageId: row.messageId,
          cardId: row.cardId,
          address: row.address,
          network: row.network,
          approved: row.approved,
          reason: row.reason,
          requestedMicros: row.requestedMicros,
          approvedMicros: row.approved ? row.requestedMicros : 0n,
          heldMicros: row.approved ? row.requestedMicros : 0n,
          availableAfterMicros: null,
          status: row.approved ? "pending" : "declined",
          merchantName: row.merchant.name,
          merchantMcc: row.merchant.mcc,
          merchantCity: row.merchant.city,
          merchantCountry: row.merchant.country,
          channel: row.channel,
          createdAt: row.at,
          updatedAt: row.at,
          holdExpiresAt: row.holdExpiresAt
        })}
        ON CONFLICT (id) DO UPDATE SET approved = EXCLUDED.approved, reason = EXCLUDED.reason,
          approved_micros = EXCLUDED.approved_micros, held_micros = EXCLUDED.held_micros,
          available_after_micros = NULL, status = EXCLUDED.status, updated_at = EXCLUDED.updated_at
        RETURNING *`,
        sql`${asJson} AS row`
      ).pipe(Effect.map((rows) => rowOf(rows[0])))

    /** An authorization's amounts after an event, when it is still as read (`amounts` holds the new ones). */
    const updateAmounts = (id: string, amounts: Amounts, at: Date, publishing: Publishing) =>
      withEvents(
        publishing,
        sql`UPDATE card_authorizations SET approved_micros = ${amounts.approved}, held_micros = ${amounts.held},
              cleared_micros = ${amounts.cleared}, status = ${amounts.status}, updated_at = ${at}
            WHERE id = ${id} RETURNING *`,
        sql`${asJson} AS row`
      ).pipe(Effect.map((rows) => rowOf(rows[0])))

    /** Records a network event once; false when it was recorded before. */
    const insertEvent = (row: NetworkEventRow) =>
      sql`INSERT INTO card_network_events ${sql.insert({
        id: row.id,
        transactionId: row.transactionId,
        authorizationId: row.authorizationId,
        cardId: row.cardId,
        address: row.address,
        kind: row.kind === "adjustment" ? "increment" : row.kind,
        amountMicros: row.amountMicros,
        approved: row.approved,
        reason: row.reason,
        money: row.money,
        merchantName: row.merchant.name,
        merchantMcc: row.merchant.mcc,
        merchantCity: row.merchant.city,
        merchantCountry: row.merchant.country,
        createdAt: row.at
      })} ON CONFLICT (id) DO NOTHING RETURNING id`.pipe(Effect.map((rows) => rows.length === 1))

    /** An authorization, read as it stands (for the sandbox network's answers). */
    const find = SqlSchema.findOne({
      Request: Schema.String,
      Result: Schema.Unknown,
      execute: (id) => sql`SELECT ${asJson} AS row FROM card_authorizations WHERE id = ${id}`
    })

    /** The decline reason stored for a request message: the authorization's own, or an increment's. */
    const declineReason = (authorizationId: string, messageId: string) =>
      sql<{ reason: string | null }>`
        SELECT reason FROM card_authorizations WHERE id = ${authorizationId} AND message_id = ${messageId}
        UNION ALL
        SELECT reason FROM card_network_events WHERE id = ${messageId} AND kind = 'increment'
        LIMIT 1`.pipe(Effect.map((rows) => Option.fromNullable(rows[0]?.reason)))

    /** An authorization locked for an event (after its card's lock). */
    const lockAuthorization = SqlSchema.findOne({
      Request: Schema.String,
      Result: Schema.Unknown,
      execute: (id) => sql`SELECT ${asJson} AS row FROM card_authorizations WHERE id = ${id} FOR UPDATE`
    })

    const page = SqlSchema.findAll({
      Request: Schema.Struct({ address: Schema.String, limit: Schema.Number, before: Schema.NullOr(Schema.String) }),
      Result: Schema.Unknown,
      // A cursor that is not one of the caller's authorizations yields an empty page.
      execute: ({ address, limit, before }) => sql`
        SELECT ${asJson} AS row FROM card_authorizations
        WHERE address = ${address}
          AND (${before}::text IS NULL
               OR seq < (SELECT seq FROM card_authorizations WHERE id = ${before} AND address = ${address}))
        ORDER BY seq DESC
        LIMIT ${limit}`
    })

    return {
      ...repository("AuthorizationRepo", {
        lockCard,
        position,
        insertAuthorization,
        recordStandIn,
        updateAmounts,
        insertEvent,
        declineReason,
        find: (id: string) => find(id).pipe(Effect.map(Option.map(rowOf))),
        lockAuthorization: (id: string) => lockAuthorization(id).pipe(Effect.map(Option.map(rowOf))),
        page: (query: { address: string; limit: number; before: string | null }) =>
          page(query).pipe(Effect.map((rows) => rows.map(rowOf)))
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}
