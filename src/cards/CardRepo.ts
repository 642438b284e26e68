/**
 * SQL for cards. Number and CVV arrive here already sealed (see Cards and Secrets); the table has a
 * unique user (`cards_address_key`) and a unique document hash (`cards_document_hash_key`), so the
 * database itself guarantees one card per user and per identity document. Infrastructure failures die here.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository } from "../storage/Sql.js"
import { CardRef } from "./Card.js"

export const CardRow = Schema.Struct({
  id: Schema.String,
  address: Address,
  holder: Schema.String,
  numberSealed: Schema.Uint8ArrayFromSelf,
  cvvSealed: Schema.Uint8ArrayFromSelf,
  expiry: Schema.String,
  createdAt: Schema.DateFromSelf
})
export type CardRow = typeof CardRow.Type

export type NewCardRow = {
  readonly id: string
  readonly address: string
  readonly issuer: string
  readonly issuerRef: string
  readonly holder: string
  readonly numberSealed: Uint8Array
  readonly cvvSealed: Uint8Array
  readonly last4: string
  readonly expiry: string
  readonly documentHash: Uint8Array
  readonly createdAt: Date
}

export class CardRepo extends Effect.Service<CardRepo>()("app/CardRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const findByAddress = SqlSchema.findOne({
      Request: Schema.String,
      Result: CardRow,
      execute: (address) =>
        sql`SELECT id, address, holder, number_sealed, cvv_sealed, expiry, created_at
            FROM cards WHERE address = ${address}`
    })

    /** A card by its holder's address or by its id. */
    const findRef = SqlSchema.findOne({
      Request: Schema.String,
      Result: CardRef,
      execute: (addressOrId) =>
        sql`SELECT id, address, created_at FROM cards WHERE address = ${addressOrId} OR id = ${addressOrId}`
    })

    /** The address holding a card issued for this document hash, if any. */
    const holderOfDocument = (documentHash: Uint8Array) =>
      sql<{ address: string }>`SELECT address FROM cards WHERE document_hash = ${documentHash}`.pipe(
        Effect.map((rows) => rows[0]?.address)
      )

    const hasCard = (address: string) =>
      sql<{ n: number }>`SELECT count(*)::int AS n FROM cards WHERE address = ${address}`.pipe(
        Effect.map((rows) => (rows[0]?.n ?? 0) > 0)
      )

    /**
     * Inserts the card unless the user or the document already holds one; true when inserted.
     * `ON CONFLICT DO NOTHING` waits for a concurrent insert of the same key and then yields, so
     * the transaction stays usable and the caller can tell which constraint stopped it.
     */
    const insertIfAbsent = (row: NewCardRow) =>
      sql`INSERT INTO cards ${sql.insert(row)} ON CONFLICT DO NOTHING RETURNING id`.pipe(
        Effect.map((rows) => rows.length === 1)
      )

    return repository("CardRepo", { findByAddress, findRef, holderOfDocument, hasCard, insertIfAbsent })
  })
}) {}
