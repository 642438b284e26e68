/** SQL for challenges, users and sessions. Infrastructure failures die here. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository } from "../storage/Sql.js"

const ChallengeRow = Schema.Struct({
  message: Schema.String,
  expiresAt: Schema.DateFromSelf,
  usedAt: Schema.NullOr(Schema.DateFromSelf)
})

/** A session with its user's first sign-in (`GET /me` shows it: one statement reads both). */
const SessionRow = Schema.Struct({
  address: Address,
  expiresAt: Schema.DateFromSelf,
  userCreatedAt: Schema.DateFromSelf
})

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
      // Committed without waiting for its WAL flush (this transaction only): a challenge lost to a
      // crash is one the client asks for again, and the sign-in that consumes it commits durably,
      // flushing it too (docs/security.md, issue 27).
      execute: ({ nonce, address, message, issuedAt, expiresAt }) =>
        sql`INSERT INTO auth_challenges (nonce, address, message, issued_at, expires_at)
            SELECT ${nonce}, ${address}, ${message}, ${issuedAt}::timestamptz, ${expiresAt}::timestamptz
            FROM (SELECT set_config('synchronous_commit', 'off', true)) AS relaxed`
    })

    /** Why a challenge cannot be used (read only when `signIn` consumed nothing). */
    const findChallenge = SqlSchema.findOne({
      Request: Schema.String,
      Result: ChallengeRow,
      execute: (nonce) => sql`SELECT message, expires_at, used_at FROM auth_challenges WHERE nonce = ${nonce}`
    })

    /**
     * Sign-in in one statement: consumes the challenge, creates the user on first sign-in and opens
     * the session. Consuming is the atomic single-use gate: when the exact message is not an unused,
     * unexpired challenge no row is updated and nothing else is written (none). Answers whether
     * this statement created the user.
     */
    const signIn = SqlSchema.findOne({
      Request: Schema.Struct({
        nonce: Schema.String,
        message: Schema.String,
        tokenHash: Schema.Uint8ArrayFromSelf,
        now: Schema.DateFromSelf,
        expiresAt: Schema.DateFromSelf
      }),
      Result: Schema.Struct({ address: Address, created: Schema.Boolean }),
      execute: ({ nonce, message, tokenHash, now, expiresAt }) =>
        sql`WITH consumed AS (
              UPDATE auth_challenges SET used_at = ${now}
              WHERE nonce = ${nonce} AND message = ${message} AND used_at IS NULL AND expires_at > ${now}
              RETURNING address
            ), created AS (
              INSERT INTO users (address, created_at) SELECT address, ${now}::timestamptz FROM consumed
              ON CONFLICT (address) DO NOTHING
              RETURNING address
            ), opened AS (
              INSERT INTO sessions (token_hash, address, created_at, expires_at)
              SELECT ${tokenHash}::bytea, address, ${now}::timestamptz, ${expiresAt}::timestamptz FROM consumed
              RETURNING address
            )
            SELECT address, EXISTS (SELECT FROM created) AS created FROM opened`
    })

    const findSession = SqlSchema.findOne({
      Request: Schema.Uint8ArrayFromSelf,
      Result: SessionRow,
      execute: (tokenHash) =>
        sql`SELECT s.address, s.expires_at, u.created_at AS user_created_at
            FROM sessions s JOIN users u ON u.address = s.address WHERE s.token_hash = ${tokenHash}`
    })

    const deleteSession = (tokenHash: Uint8Array) => sql`DELETE FROM sessions WHERE token_hash = ${tokenHash}`

    return {
      ...repository("AuthRepo", {
        insertChallenge,
        findChallenge,
        signIn,
        findSession,
        deleteSession
      })
    }
  })
}) {}
