/**
 * SQL for spending allowances: the holders' permit requests, the one submitted last (the card's
 * allowance), and what the token and the card's commitments say of it. Infrastructure failures die here.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { repository } from "../storage/Sql.js"

/** A permit request as stored: amounts in USD1 atomic units. */
const RequestRow = Schema.Struct({
  id: Schema.String,
  owner: Schema.String,
  spender: Schema.String,
  cap: Schema.BigInt,
  permitNonce: Schema.BigInt,
  deadline: Schema.DateFromSelf
})
export type RequestRow = typeof RequestRow.Type

/** The card's allowance as the program knows it, with the commitments it covers. */
const CurrentRow = Schema.Struct({
  cap: Schema.NullOr(Schema.BigInt),
  spender: Schema.NullOr(Schema.String),
  deadline: Schema.NullOr(Schema.DateFromSelf),
  txHash: Schema.NullOr(Schema.String),
  seen: Schema.Boolean,
  onChain: Schema.BigInt,
  heldMicros: Schema.BigInt,
  clearedPendingMicros: Schema.BigInt
})
export type CurrentRow = typeof CurrentRow.Type

export class AllowanceRepo extends Effect.Service<AllowanceRepo>()("app/AllowanceRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const insertRequest = (row: RequestRow & { readonly cardId: string; readonly at: Date }) =>
      sql`INSERT INTO card_allowances ${sql.insert({
        id: row.id,
        cardId: row.cardId,
        owner: row.owner,
        spender: row.spender,
        cap: row.cap.toString(),
        permitNonce: row.permitNonce.toString(),
        deadline: row.deadline,
        requestedAt: row.at
      })}`.pipe(Effect.asVoid)

    /** The card's latest request not yet submitted. */
    const openRequest = SqlSchema.findOne({
      Request: Schema.String,
      Result: RequestRow,
      execute: (cardId) => sql`
        SELECT id, owner, spender, cap, permit_nonce, deadline FROM card_allowances
        WHERE card_id = ${cardId} AND submitted_at IS NULL
        ORDER BY requested_at DESC LIMIT 1`
    })

    /** Records the signed permit transaction before it is sent; false when the request was submitted already. */
    const recordSubmitted = (
      id: string,
      signed: { readonly hash: string; readonly raw: string; readonly nonce: number },
      at: Date
    ) =>
      sql`
        UPDATE card_allowances
        SET submitted_at = ${at}, tx_hash = ${signed.hash}, tx_raw = ${signed.raw}, tx_nonce = ${signed.nonce}
        WHERE id = ${id} AND submitted_at IS NULL
        RETURNING id`.pipe(Effect.map((rows) => rows.length === 1))

    /**
     * The card's latest submitted allowance (none: nulls), what the token allows its wallet's spender
     * as the follower last read it, and the open holds and cleared amounts not debited that it covers.
     */
    const current = SqlSchema.single({
      Request: Schema.Struct({ cardId: Schema.String, address: Schema.String, now: Schema.DateFromSelf }),
      Result: CurrentRow,
      execute: ({ cardId, address, now }) => sql`
        SELECT a.cap, a.spender, a.deadline, a.tx_hash, coalesce(a.seen_at IS NOT NULL, false) AS seen,
          coalesce((SELECT allowance FROM card_wallet_balances WHERE address = ${address}), 0) AS on_chain,
          (SELECT coalesce(sum(held_micros), 0) FROM card_authorizations
            WHERE card_id = ${cardId} AND held_micros > 0 AND hold_expires_at > ${now}) AS held_micros,
          (SELECT coalesce(sum(amount_micros), 0) FROM card_network_events
            WHERE card_id = ${cardId} AND money = 'debit_pending') AS cleared_pending_micros
        FROM (SELECT 1) one
        LEFT JOIN LATERAL (
          SELECT cap, spender, deadline, tx_hash, seen_at FROM card_allowances
          WHERE card_id = ${cardId} AND submitted_at IS NOT NULL
          ORDER BY submitted_at DESC LIMIT 1
        ) a ON true`
    })

    return repository("AllowanceRepo", { insertRequest, openRequest, recordSubmitted, current })
  })
}) {}
