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
  readonly numberHash: Uint8Array
  readonly createdAt: Date
}

/** A new face for a card: the replaced one moves to `card_replaced_faces`. */
export type NewFace = Pick<NewCardRow, "issuerRef" | "numberSealed" | "cvvSealed" | "last4" | "expiry" | "numberHash">

/** A face the network may present, found by its number's hash: the card's own, or one it replaced. */
export const FaceRow = Schema.Struct({
  cardId: Schema.String,
  issuerRef: Schema.String,
  last4: Schema.String,
  expiry: Schema.String,
  cvvSealed: Schema.Uint8ArrayFromSelf,
  replaced: Schema.Boolean
})
export type FaceRow = typeof FaceRow.Type

const Micros = Schema.NullOr(Schema.BigInt)

/** The holder's controls as stored: limits in millionths of a dollar, null for none. */
export const ControlsRow = Schema.Struct({
  /** The holder's own freeze. */
  frozen: Schema.Boolean,
  /** What the card owes the program: a card that owes declines as frozen too. Not a control: never written here. */
  owedMicros: Schema.BigInt,
  perTransactionMicros: Micros,
  dailyMicros: Micros,
  monthlyMicros: Micros,
  blockedMcc: Schema.Array(Schema.String)
})
export type ControlsRow = typeof ControlsRow.Type

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

    const faceByNumberHash = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: FaceRow,
      execute: (hash) => sql`
        SELECT id AS card_id, issuer_ref, last4, expiry, cvv_sealed, false AS replaced FROM cards WHERE number_hash = ${hash}
        UNION ALL
        SELECT card_id, issuer_ref, last4, expiry, cvv_sealed, true FROM card_replaced_faces WHERE number_hash = ${hash}
        LIMIT 1`
    })

    const controls = SqlSchema.findOne({
      Request: Schema.String,
      Result: ControlsRow,
      execute: (address) => sql`
        SELECT frozen, owed_micros, per_transaction_micros, daily_micros, monthly_micros, blocked_mcc
        FROM cards WHERE address = ${address}`
    })

    /** Sets the controls; the row is locked while an authorization decides on it, so they apply to the next one. */
    const updateControls = SqlSchema.findOne({
      Request: Schema.Struct({ address: Schema.String, controls: Schema.typeSchema(ControlsRow) }),
      Result: ControlsRow,
      execute: ({ address, controls: next }) => sql`
        UPDATE cards SET frozen = ${next.frozen}, per_transaction_micros = ${next.perTransactionMicros},
          daily_micros = ${next.dailyMicros}, monthly_micros = ${next.monthlyMicros},
          blocked_mcc = ${next.blockedMcc}::text[]
        WHERE address = ${address}
        RETURNING frozen, owed_micros, per_transaction_micros, daily_micros, monthly_micros, blocked_mcc`
    })

    /**
     * Moves the card's face to the replaced faces and gives it `face`, in one statement, with the
     * row locked; the old issuer ref, answered.
     */
    const replaceFace = (address: string, face: NewFace, at: Date) =>
      sql<{ oldIssuerRef: string }>`
        WITH old AS (
          SELECT id, issuer, issuer_ref, number_hash, number_sealed, cvv_sealed, last4, expiry
          FROM cards WHERE address = ${address} FOR UPDATE
        ), kept AS (
          INSERT INTO card_replaced_faces
            (issuer, issuer_ref, card_id, number_hash, number_sealed, cvv_sealed, last4, expiry, replaced_at)
          SELECT issuer, issuer_ref, id, number_hash, number_sealed, cvv_sealed, last4, expiry, ${at} FROM old
        )
        UPDATE cards c SET issuer_ref = ${face.issuerRef}, number_hash = ${face.numberHash},
          number_sealed = ${face.numberSealed}, cvv_sealed = ${face.cvvSealed}, last4 = ${face.last4},
          expiry = ${face.expiry}
        FROM old WHERE c.id = old.id
        RETURNING old.issuer_ref AS old_issuer_ref`.pipe(Effect.map((rows) => rows[0]?.oldIssuerRef))

    /** Cards issued before numbers were hashed, with their sealed numbers (filled at start-up). */
    const withoutNumberHash = sql<{ id: string; numberSealed: Uint8Array }>`
      SELECT id, number_sealed FROM cards WHERE number_hash IS NULL
      UNION ALL
      SELECT card_id, number_sealed FROM card_replaced_faces WHERE number_hash IS NULL`

    const setNumberHash = (id: string, sealed: Uint8Array, hash: Uint8Array) =>
      Effect.zipRight(
        sql`UPDATE cards SET number_hash = ${hash} WHERE id = ${id} AND number_sealed = ${sealed}`,
        sql`UPDATE card_replaced_faces SET number_hash = ${hash} WHERE card_id = ${id} AND number_sealed = ${sealed}`
      )

    return repository("CardRepo", {
      findByAddress,
      findRef,
      holderOfDocument,
      hasCard,
      insertIfAbsent,
      faceByNumberHash,
      controls,
      updateControls,
      replaceFace,
      withoutNumberHash: () => withoutNumberHash,
      setNumberHash
    })
  })
}) {}
