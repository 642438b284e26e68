/**
 * SQL for the money behind the card (docs/cards.md, "The money behind the card"): the clearings and
 * refunds whose USD1 is still to move, the settlement account's transfers that move it (recorded
 * before they are broadcast, one per network event), what a card owes when a debit cannot be made,
 * and the settlement of each once the balance follower has read the block that moved it.
 * Infrastructure failures die here.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import type { SignedTransaction } from "../chain/ChainClient.js"
import { repository } from "../storage/Sql.js"

/** A clearing (debit) or refund whose money is still to move and that no transfer carries yet. */
const DueRow = Schema.Struct({
  id: Schema.String,
  kind: Schema.Literal("clearing", "refund"),
  cardId: Schema.String,
  address: Address,
  amountMicros: Schema.BigInt
})
export type DueRow = typeof DueRow.Type

/** A transfer not yet final or undone: what the follower checks on chain. */
const OpenRow = Schema.Struct({
  eventId: Schema.String,
  kind: Schema.Literal("debit", "refund"),
  cardId: Schema.String,
  wallet: Address,
  amount: Schema.BigInt,
  nonce: Schema.Number,
  hash: Schema.String,
  raw: Schema.String,
  earlierHashes: Schema.Array(Schema.String),
  bumps: Schema.Number,
  signedAt: Schema.DateFromSelf,
  state: Schema.Literal("sent", "mined"),
  minedHash: Schema.NullOr(Schema.String),
  block: Schema.NullOr(Schema.BigInt)
})
export type OpenRow = typeof OpenRow.Type

/** What moved, for the holder's event: the clearing's or refund's amount and the card's debt after it. */
const MovedRow = Schema.Struct({
  eventId: Schema.String,
  kind: Schema.Literal("clearing", "refund"),
  address: Address,
  authorizationId: Schema.NullOr(Schema.String),
  amountMicros: Schema.BigInt,
  tx: Schema.NullOr(Schema.String),
  owedMicros: Schema.BigInt
})
export type MovedRow = typeof MovedRow.Type

/** A transfer as recorded before its broadcast. */
export interface NewTransfer {
  readonly eventId: string
  readonly kind: "debit" | "refund"
  readonly cardId: string
  readonly wallet: Address
  readonly amount: bigint
  readonly signed: SignedTransaction
}

export class CardSettlementRepo extends Effect.Service<CardSettlementRepo>()("app/CardSettlementRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /** The oldest clearings and refunds whose money is still to move, that no transfer carries. */
    const due = SqlSchema.findAll({
      Request: Schema.Struct({ limit: Schema.Number, ids: Schema.NullOr(Schema.Array(Schema.String)) }),
      Result: DueRow,
      execute: ({ limit, ids }) => sql`
        SELECT e.id, e.kind, e.card_id, e.address, e.amount_micros FROM card_network_events e
        WHERE e.money IN ('debit_pending', 'credit_pending')
          AND NOT EXISTS (SELECT 1 FROM card_program_transfers t WHERE t.event_id = e.id)
          ${ids === null ? sql`` : sql`AND e.id IN ${sql.in(ids)}`}
        ORDER BY e.seq LIMIT ${limit}`
    })

    /** USD1 (atomic units) of the transfers sent and not mined yet, per card wallet and kind. */
    const inFlight = SqlSchema.findAll({
      Request: Schema.Void,
      Result: Schema.Struct({ wallet: Address, kind: Schema.Literal("debit", "refund"), amount: Schema.BigInt }),
      execute: () => sql`
        SELECT wallet, kind, sum(amount) AS amount FROM card_program_transfers
        WHERE state = 'sent' GROUP BY wallet, kind`
    })

    const recordTransfers = (transfers: ReadonlyArray<NewTransfer>, at: Date) =>
      sql`INSERT INTO card_program_transfers ${sql.insert(
        transfers.map((transfer) => ({
          eventId: transfer.eventId,
          kind: transfer.kind,
          cardId: transfer.cardId,
          wallet: transfer.wallet,
          amount: transfer.amount.toString(),
          sender: transfer.signed.sender,
          nonce: transfer.signed.nonce,
          hash: transfer.signed.hash,
          raw: transfer.signed.raw,
          signedAt: at,
          state: "sent",
          createdAt: at
        }))
      )}`.pipe(Effect.asVoid)

    /**
     * Clearings that cannot be debited become owed, in one statement: each adds its amount to its
     * card's debt (an entry, and the card's `owed_micros`) unless it was owed already. A clearing
     * of nothing is simply debited. The rows say what each card owes now.
     */
    const owe = SqlSchema.findAll({
      Request: Schema.Struct({ ids: Schema.Array(Schema.String), at: Schema.DateFromSelf }),
      Result: MovedRow,
      execute: ({ ids, at }) => sql`
        WITH owed AS (
          UPDATE card_network_events SET money = CASE WHEN amount_micros = 0 THEN 'debited' ELSE 'owed' END
          WHERE id IN ${sql.in(ids)} AND money = 'debit_pending'
          RETURNING id, card_id, address, authorization_id, amount_micros
        ),
        entries AS (
          INSERT INTO card_owed_entries (card_id, amount_micros, event_id, created_at)
          SELECT card_id, amount_micros, id, ${at} FROM owed WHERE amount_micros > 0
          RETURNING card_id, amount_micros
        ),
        debts AS (
          UPDATE cards c SET owed_micros = c.owed_micros + added.total
          FROM (SELECT card_id, sum(amount_micros) AS total FROM entries GROUP BY card_id) added
          WHERE c.id = added.card_id
          RETURNING c.id, c.owed_micros
        )
        SELECT o.id AS event_id, 'clearing' AS kind, o.address, o.authorization_id, o.amount_micros, NULL AS tx,
               coalesce(d.owed_micros, (SELECT owed_micros FROM cards WHERE id = o.card_id)) AS owed_micros
        FROM owed o LEFT JOIN debts d ON d.id = o.card_id
        WHERE o.amount_micros > 0`
    })

    /** Transfers not final yet, lowest nonce first. */
    const open = SqlSchema.findAll({
      Request: Schema.Number,
      Result: OpenRow,
      execute: (limit) => sql`
        SELECT event_id, kind, card_id, wallet, amount, nonce::int, hash, raw, earlier_hashes, bumps, signed_at, state,
               mined_hash, block
        FROM card_program_transfers WHERE state IN ('sent', 'mined') ORDER BY nonce LIMIT ${limit}`
    })

    /** Every recorded transaction of the settlement account from `nonce` up (transfers and permits), in nonce order. */
    const journalFrom = SqlSchema.findAll({
      Request: Schema.Struct({ sender: Schema.String, nonce: Schema.Number }),
      Result: Schema.Struct({ eventId: Schema.NullOr(Schema.String), nonce: Schema.Number, raw: Schema.String }),
      execute: ({ sender, nonce }) => sql`
        SELECT event_id, nonce::int, raw FROM card_program_transfers
        WHERE sender = ${sender} AND state = 'sent' AND nonce >= ${nonce}
        UNION ALL
        SELECT NULL, tx_nonce::int, tx_raw FROM card_allowances
        WHERE spender = ${sender} AND tx_nonce >= ${nonce} AND seen_at IS NULL
        ORDER BY nonce`
    })

    /** The transfer was found mined (or mined again, in another block). */
    const mined = (eventId: string, hash: string, block: bigint, final: boolean) =>
      sql`
        UPDATE card_program_transfers SET state = ${final ? "final" : "mined"}, mined_hash = ${hash}, block = ${block}
        WHERE event_id = ${eventId} AND state IN ('sent', 'mined')`.pipe(Effect.asVoid)

    /** The transfer's block went away (a reorg): it waits to be mined again. */
    const unmined = (eventId: string) =>
      sql`
        UPDATE card_program_transfers SET state = 'sent', mined_hash = NULL, block = NULL
        WHERE event_id = ${eventId} AND state = 'mined'`.pipe(Effect.asVoid)

    /** A fee bump replaced the transfer's transaction at its nonce; the earlier one may still be the one mined. */
    const bumped = (eventId: string, signed: SignedTransaction, at: Date) =>
      sql`
        UPDATE card_program_transfers
        SET earlier_hashes = array_append(earlier_hashes, hash), hash = ${signed.hash}, raw = ${signed.raw},
            bumps = bumps + 1, signed_at = ${at}
        WHERE event_id = ${eventId} AND state = 'sent'`.pipe(Effect.asVoid)

    /**
     * The transfer's nonce went to another transaction and none of its own was mined: it can never
     * be, so it is forgotten and its event is due again.
     */
    const forget = (eventId: string) =>
      sql`DELETE FROM card_program_transfers WHERE event_id = ${eventId} AND state = 'sent'`.pipe(Effect.asVoid)

    /** A debit mined reverted: it moved nothing (its clearing is then owed, `owe`). */
    const reverted = (eventId: string, hash: string, block: bigint) =>
      sql`
        UPDATE card_program_transfers SET state = 'reverted', mined_hash = ${hash}, block = ${block}
        WHERE event_id = ${eventId} AND state IN ('sent', 'mined')`.pipe(Effect.asVoid)

    /**
     * Every mined transfer whose block the balance follower has read is settled, in one statement:
     * its event's money is debited or credited (the wallet's balance and allowance as stored now
     * count it, so it stops counting as pending), and an authorization that holds nothing more and
     * has no clearing left to debit is `settled`.
     */
    const settle = SqlSchema.findAll({
      Request: Schema.DateFromSelf,
      Result: MovedRow,
      execute: (at) => sql`
        WITH done AS (
          UPDATE card_program_transfers t SET settled_at = ${at}
          FROM card_balance_follower f
          WHERE t.state IN ('mined', 'final') AND t.settled_at IS NULL AND t.block <= f.block
          RETURNING t.event_id, t.kind, t.mined_hash
        ),
        moved AS (
          UPDATE card_network_events e SET money = CASE d.kind WHEN 'debit' THEN 'debited' ELSE 'credited' END
          FROM done d WHERE e.id = d.event_id AND e.money IN ('debit_pending', 'credit_pending')
          RETURNING e.id, e.kind, e.address, e.card_id, e.authorization_id, e.amount_micros, d.mined_hash
        ),
        -- (a data-modifying WITH runs whether or not the query reads it)
        settled AS (
          UPDATE card_authorizations a SET status = 'settled', updated_at = ${at}
          WHERE a.id IN (SELECT authorization_id FROM moved) AND a.status = 'pending'
            AND (a.held_micros = 0 OR a.hold_expires_at <= ${at})
            AND NOT EXISTS (
              SELECT 1 FROM card_network_events p
              WHERE p.authorization_id = a.id AND p.money IN ('debit_pending', 'owed')
                AND p.id NOT IN (SELECT id FROM moved))
          RETURNING a.id
        )
        SELECT m.id AS event_id, m.kind, m.address, m.authorization_id, m.amount_micros, m.mined_hash AS tx,
               c.owed_micros
        FROM moved m JOIN cards c ON c.id = m.card_id`
    })

    return repository("CardSettlementRepo", {
      due,
      inFlight,
      recordTransfers,
      owe,
      open,
      journalFrom,
      mined,
      unmined,
      bumped,
      forget,
      reverted,
      settle
    })
  })
}) {}
