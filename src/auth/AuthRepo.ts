/** SQL for challenges, users and sessions. Infrastructure failures die here. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository, transactionally } from "../Sql.js"

const ChallengeRow = Schema.Struct({
  nonce: Schema.String,
  address: Address,
  message: Schema.String,
  expiresAt: Schema.DateFromSelf,
  usedAt: Schema.NullOr(Schema.DateFromSelf)
})

const SessionRow = Schema.Struct({ address: Address, expiresAt: Schema.DateFromSelf })
const UserRow = Schema.Struct({ address: Address, createdAt: Schema.DateFromSelf })

export class AuthRepo extends Effect.Service<AuthRepo>()("app/AuthRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const insertChallenge = SqlSchema.void({
      Request: Schema.Struct({
        nonce: Schema.String,
        address: Schema.String,
        message: Schema.String,
        issuedAt: Schema.DateFromSelf,
        expiresAt: Schema.DateFromSelf
      }),
      execute: (row) => sql`INSERT INTO auth_challenges ${sql.insert(row)}`
    })

    const findChallenge = SqlSchema.findOne({
      Request: Schema.String,
      Result: ChallengeRow,
      execute: (nonce) =>
        sql`SELECT nonce, address, message, expires_at, used_at FROM auth_challenges WHERE nonce = ${nonce}`
    })

    /** Marks the challenge used; false when another request used it first or it expired. */
    const consumeChallenge = (nonce: string, now: Date) =>
      sql`UPDATE auth_challenges SET used_at = ${now}
          WHERE nonce = ${nonce} AND used_at IS NULL AND expires_at > ${now}
          RETURNING nonce`.pipe(Effect.map((rows) => rows.length === 1))

    /** Challenges are kept a day after expiry (for investigation), then dropped. */
    const pruneChallenges = (before: Date) => sql`DELETE FROM auth_challenges WHERE expires_at < ${before}`

    const upsertUser = SqlSchema.single({
      Request: Schema.Struct({ address: Schema.String, createdAt: Schema.DateFromSelf }),
      Result: UserRow,
      execute: (row) =>
        sql`INSERT INTO users ${sql.insert(row)}
            ON CONFLICT (address) DO UPDATE SET address = EXCLUDED.address
            RETURNING address, created_at`
    })

    const findUser = SqlSchema.findOne({
      Request: Schema.String,
      Result: UserRow,
      execute: (address) => sql`SELECT address, created_at FROM users WHERE address = ${address}`
    })

    const insertSession = SqlSchema.void({
      Request: Schema.Struct({
        tokenHash: Schema.Uint8ArrayFromSelf,
        address: Schema.String,
        createdAt: Schema.DateFromSelf,
        expiresAt: Schema.DateFromSelf
      }),
      execute: (row) => sql`INSERT INTO sessions ${sql.insert(row)}`
    })

    const findSession = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: SessionRow,
      execute: (tokenHash) => sql`SELECT address, expires_at FROM sessions WHERE token_hash = ${tokenHash}`
    })

    const deleteSession = (tokenHash: Uint8Array) => sql`DELETE FROM sessions WHERE token_hash = ${tokenHash}`

    return {
      ...repository("AuthRepo", {
        insertChallenge,
        findChallenge,
        consumeChallenge,
        pruneChallenges,
        upsertUser,
        findUser,
        insertSession,
        findSession,
        deleteSession
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}
