/**
 * SQL for the reconciliation: the network's clearings and refunds, the settlement account's
 * transfers, the owed ledger and the cards that owe or owed, read in one read-only REPEATABLE READ
 * transaction, so that the four reads see one moment of the database (a transfer and its event
 * written by the engine between two reads would otherwise look like a difference).
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { repository } from "../storage/Sql.js"

const EventRow = Schema.Struct({
  id: Schema.String,
  kind: Schema.Literal("clearing", "refund"),
  cardId: Schema.String,
  address: Schema.String,
  amountMicros: Schema.BigInt,
  money: Schema.NullOr(Schema.String),
  createdAt: Schema.DateFromSelf
})

const TransferRow = Schema.Struct({
  eventId: Schema.String,
  kind: Schema.Literal("debit", "refund"),
  cardId: Schema.String,
  wallet: Schema.String,
  amount: Schema.BigInt,
  sender: Schema.String,
  state: Schema.Literal("sent", "mined", "final"),
  minedHash: Schema.NullOr(Schema.String),
  block: Schema.NullOr(Schema.BigInt),
  createdAt: Schema.DateFromSelf
})

const OwedRow = Schema.Struct({
  id: Schema.String,
  cardId: Schema.String,
  amountMicros: Schema.BigInt,
  eventId: Schema.NullOr(Schema.String),
  repaymentTx: Schema.NullOr(Schema.String)
})

const CardRow = Schema.Struct({
  id: Schema.String,
  address: Schema.String,
  agentWallet: Schema.NullOr(Schema.String),
  owedMicros: Schema.BigInt
})

export class ReconciliationRepo extends Effect.Service<ReconciliationRepo>()("app/ReconciliationRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const events = SqlSchema.findAll({
      Request: Schema.Void,
      Result: EventRow,
      execute: () => sql`
        SELECT id, kind, card_id, address, amount_micros::text, money, created_at FROM card_network_events
        WHERE kind IN ('clearing', 'refund') ORDER BY seq`
    })
    const transfers = SqlSchema.findAll({
      Request: Schema.Void,
      Result: TransferRow,
      execute: () => sql`
        SELECT event_id, kind, card_id, wallet, amount::text, sender, state, mined_hash, block::text, created_at
        FROM card_program_transfers ORDER BY seq`
    })
    const owedEntries = SqlSchema.findAll({
      Request: Schema.Void,
      Result: OwedRow,
      execute: () => sql`
        SELECT id::text, card_id, amount_micros::text, event_id, repayment_tx FROM card_owed_entries ORDER BY id`
    })
    const cards = SqlSchema.findAll({
      Request: Schema.Void,
      Result: CardRow,
      execute: () => sql`
        SELECT c.id, c.address, s.wallet AS agent_wallet, c.owed_micros::text FROM cards c
        LEFT JOIN agent_strategies s ON s.card_id = c.id
        WHERE c.owed_micros <> 0 OR EXISTS (SELECT 1 FROM card_owed_entries e WHERE e.card_id = c.id)
        ORDER BY c.id`
    })

    /** Everything the reconciliation reads of the database, as of one moment. */
    const facts = Effect.gen(function* () {
      yield* sql`SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY`
      return yield* Effect.all({
        events: events(),
        transfers: transfers(),
        owedEntries: owedEntries(),
        cards: cards()
      })
    }).pipe(sql.withTransaction)

    return repository("ReconciliationRepo", { facts: () => facts })
  })
}) {}
