/**
 * SQL for what cards owe the program and what they have committed: the owed ledger
 * (`card_owed_entries`, its sum kept on `cards.owed_micros`) and, for the agent's pages, each card's
 * open holds, cleared amounts not yet debited, owed amount and allowance in one statement.
 * Infrastructure failures die here.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository, transactionally } from "../storage/Sql.js"

/** A card's commitments, millionths of a dollar. */
export const CommitmentsRow = Schema.Struct({
  cardId: Schema.String,
  heldMicros: Schema.BigInt,
  clearedPendingMicros: Schema.BigInt,
  owedMicros: Schema.BigInt,
  /** What the token allows the settlement account to take, as last read; 0 when nothing (or never read). */
  allowanceMicros: Schema.BigInt
})
export type CommitmentsRow = typeof CommitmentsRow.Type

export class CardDebtRepo extends Effect.Service<CardDebtRepo>()("app/CardDebtRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * Each card's commitments at `now`, in one statement whatever the number of cards: every sum is
     * read card by card through its partial index (holds by card and expiry, pending clearings by card).
     */
    const commitments = (request: {
      readonly cardIds: ReadonlyArray<string>
      readonly now: Date
      /** USD1 atomic units per millionth of a dollar. */
      readonly atomicPerMicro: bigint
    }) =>
      SqlSchema.findAll({
        Request: Schema.Unknown,
        Result: CommitmentsRow,
        execute: () => sql`
          SELECT c.id AS card_id, c.owed_micros,
                 (SELECT coalesce(sum(held_micros), 0) FROM card_authorizations
                   WHERE card_id = c.id AND held_micros > 0 AND hold_expires_at > ${request.now}) AS held_micros,
                 (SELECT coalesce(sum(amount_micros), 0) FROM card_network_events
                   WHERE card_id = c.id AND money = 'debit_pending') AS cleared_pending_micros,
                 coalesce((SELECT div(allowance, ${request.atomicPerMicro.toString()}::numeric)::bigint
                           FROM card_wallet_balances WHERE address = c.address), 0) AS allowance_micros
          FROM unnest(${request.cardIds}::text[]) AS wanted (id)
          CROSS JOIN LATERAL (SELECT id, address, owed_micros FROM cards WHERE id = wanted.id) c`
      })(undefined)

    /** The repayment's entry (−amount); false when this transaction was recorded already. */
    const insertRepayment = (row: {
      readonly cardId: string
      readonly amountMicros: bigint
      readonly tx: string
      readonly at: Date
    }) =>
      sql`
        INSERT INTO card_owed_entries (card_id, amount_micros, repayment_tx, created_at)
        VALUES (${row.cardId}, ${(-row.amountMicros).toString()}::bigint, ${row.tx}, ${row.at})
        ON CONFLICT (repayment_tx) DO NOTHING
        RETURNING id`.pipe(Effect.map((rows) => rows.length === 1))

    /** Lowers what the card owes by `amountMicros`, never below 0: what it owes after, and its holder. */
    const lowerOwed = SqlSchema.single({
      Request: Schema.Struct({ cardId: Schema.String, amountMicros: Schema.BigInt }),
      Result: Schema.Struct({ owedMicros: Schema.BigInt, address: Address }),
      execute: ({ amountMicros, cardId }) => sql`
        UPDATE cards SET owed_micros = greatest(owed_micros - ${amountMicros.toString()}::bigint, 0)
        WHERE id = ${cardId}
        RETURNING owed_micros, address`
    })

    /**
     * The card's owed clearings that its repayments cover in full, oldest first, become `repaid`: a
     * clearing is covered when the owed amounts up to it (ledger order) are at most all it repaid. Their
     * authorizations that hold nothing more and have nothing left to pay are `settled`, as a debited
     * clearing's are (the program was paid, by the agent instead of the wallet).
     */
    const markRepaid = (cardId: string, at: Date) =>
      sql`
        WITH repaid AS (
          SELECT coalesce(-sum(amount_micros), 0) AS total FROM card_owed_entries
          WHERE card_id = ${cardId} AND amount_micros < 0
        ), owed AS (
          SELECT event_id, sum(amount_micros) OVER (ORDER BY id) AS running FROM card_owed_entries
          WHERE card_id = ${cardId} AND amount_micros > 0
        ), marked AS (
          UPDATE card_network_events e SET money = 'repaid'
          FROM owed, repaid
          WHERE e.id = owed.event_id AND owed.running <= repaid.total AND e.money = 'owed'
          RETURNING e.id, e.authorization_id
        )
        UPDATE card_authorizations a SET status = 'settled', updated_at = ${at}
        WHERE a.id IN (SELECT authorization_id FROM marked) AND a.status = 'pending'
          AND (a.held_micros = 0 OR a.hold_expires_at <= ${at})
          AND NOT EXISTS (
            SELECT 1 FROM card_network_events p
            WHERE p.authorization_id = a.id AND p.money IN ('debit_pending', 'owed')
              AND p.id NOT IN (SELECT id FROM marked))`

    return {
      ...repository("CardDebtRepo", {
        commitments,
        insertRepayment,
        lowerOwed,
        markRepaid
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}
