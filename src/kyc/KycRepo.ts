/**
 * SQL for the identity check: each user's state (`kyc_accounts`), provider sessions
 * (`kyc_sessions`), processed webhook deliveries (`kyc_webhook_deliveries`), and the sandbox
 * provider's own records (`kyc_sandbox_sessions`). Infrastructure failures die here.
 */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository, transactionally } from "../storage/Sql.js"
import { SandboxOutcome } from "./Api.js"
import { KycState, SessionStatus } from "./KycState.js"

const AccountRow = Schema.Struct({
  address: Address,
  status: KycState,
  provider: Schema.NullOr(Schema.String),
  sessionId: Schema.NullOr(Schema.String)
})
export type AccountRow = typeof AccountRow.Type

const SessionRow = Schema.Struct({
  provider: Schema.String,
  sessionId: Schema.String,
  address: Address,
  url: Schema.String,
  returnUrl: Schema.String,
  status: SessionStatus,
  eventAt: Schema.NullOr(Schema.DateFromSelf)
})
export type SessionRow = typeof SessionRow.Type

const SessionKey = Schema.Struct({ provider: Schema.String, sessionId: Schema.String })

/** A look at the provider about a user's pending check, due when the last is older than `cutoff`. */
export interface LookRequest {
  readonly address: string
  readonly provider: string
  readonly now: Date
  readonly cutoff: Date
}

/**
 * Whether a `kyc_accounts` row (its columns unqualified) is due a look at the provider: the one
 * condition both the read of a user's standing (is a look due?) and the claim of the look use.
 */
export const lookIsDue = (sql: SqlClient.SqlClient, { provider, cutoff }: LookRequest) =>
  sql`status = 'pending' AND provider = ${provider} AND session_id IS NOT NULL
      AND (checked_at IS NULL OR checked_at <= ${cutoff})`

export class KycRepo extends Effect.Service<KycRepo>()("app/KycRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const ensureAccount = (address: string, now: Date) =>
      sql`INSERT INTO kyc_accounts ${sql.insert({ address, status: "none", updatedAt: now })}
          ON CONFLICT (address) DO NOTHING`

    /** Reads the user's row and locks it until the transaction ends: the per-user critical section. */
    const lockAccount = SqlSchema.findOne({
      Request: Schema.String,
      Result: AccountRow,
      execute: (address) =>
        sql`SELECT address, status, provider, session_id FROM kyc_accounts WHERE address = ${address} FOR UPDATE`
    })

    const updateAccount = SqlSchema.void({
      Request: Schema.Struct({
        address: Schema.String,
        status: KycState,
        provider: Schema.NullOr(Schema.String),
        sessionId: Schema.NullOr(Schema.String),
        updatedAt: Schema.DateFromSelf
      }),
      execute: ({ address, ...row }) =>
        sql`UPDATE kyc_accounts SET ${sql.update(row)}, checked_at = NULL WHERE address = ${address}`
    })

    const setAccountStatus = (address: string, status: KycState, now: Date) =>
      sql`UPDATE kyc_accounts SET status = ${status}, updated_at = ${now} WHERE address = ${address}`

    /**
     * Claims the right to ask the provider about the user's pending session: at most one caller per
     * `cutoff` window wins, whichever replica it runs on. The session to ask about; undefined: not claimed.
     */
    const claimCheck = (request: LookRequest) =>
      sql<{ sessionId: string }>`
        UPDATE kyc_accounts SET checked_at = ${request.now}
        WHERE address = ${request.address} AND ${lookIsDue(sql, request)}
        RETURNING session_id`.pipe(Effect.map((rows) => rows[0]?.sessionId))

    const insertSession = SqlSchema.void({
      Request: Schema.Struct({
        provider: Schema.String,
        sessionId: Schema.String,
        address: Schema.String,
        url: Schema.String,
        returnUrl: Schema.String,
        status: SessionStatus,
        createdAt: Schema.DateFromSelf,
        updatedAt: Schema.DateFromSelf
      }),
      execute: (row) => sql`INSERT INTO kyc_sessions ${sql.insert(row)}`
    })

    const sessionColumns = sql`provider, session_id, address, url, return_url, status, event_at`

    const findSession = SqlSchema.findOne({
      Request: SessionKey,
      Result: SessionRow,
      execute: ({ provider, sessionId }) =>
        sql`SELECT ${sessionColumns} FROM kyc_sessions WHERE provider = ${provider} AND session_id = ${sessionId}`
    })

    const lockSession = SqlSchema.findOne({
      Request: SessionKey,
      Result: SessionRow,
      execute: ({ provider, sessionId }) =>
        sql`SELECT ${sessionColumns} FROM kyc_sessions
            WHERE provider = ${provider} AND session_id = ${sessionId} FOR UPDATE`
    })

    const updateSession = SqlSchema.void({
      Request: Schema.Struct({
        provider: Schema.String,
        sessionId: Schema.String,
        status: SessionStatus,
        eventAt: Schema.DateFromSelf,
        updatedAt: Schema.DateFromSelf
      }),
      execute: ({ provider, sessionId, ...row }) =>
        sql`UPDATE kyc_sessions SET ${sql.update(row)} WHERE provider = ${provider} AND session_id = ${sessionId}`
    })

    /** A pending session's way back: the latest trusted `returnUrl` the user gave. */
    const setReturnUrl = SqlSchema.void({
      Request: Schema.Struct({
        provider: Schema.String,
        sessionId: Schema.String,
        returnUrl: Schema.String,
        updatedAt: Schema.DateFromSelf
      }),
      execute: ({ provider, sessionId, ...row }) =>
        sql`UPDATE kyc_sessions SET ${sql.update(row)} WHERE provider = ${provider} AND session_id = ${sessionId}`
    })

    /** Where the user's current session sends the person back, if the user has one. */
    const currentReturnUrl = SqlSchema.findOne({
      Request: Schema.String,
      Result: Schema.Struct({ returnUrl: Schema.String }),
      execute: (address) =>
        sql`SELECT s.return_url FROM kyc_accounts a
            JOIN kyc_sessions s ON s.provider = a.provider AND s.session_id = a.session_id
            WHERE a.address = ${address}`
    })

    /** Records a webhook delivery; false when it was recorded before (the unique key decides). */
    const insertDelivery = (row: {
      readonly provider: string
      readonly deliveryId: string
      readonly sessionId: string | null
      readonly receivedAt: Date
    }) =>
      sql`INSERT INTO kyc_webhook_deliveries ${sql.insert(row)}
          ON CONFLICT ON CONSTRAINT kyc_webhook_deliveries_pkey DO NOTHING
          RETURNING delivery_id`.pipe(Effect.map((rows) => rows.length === 1))

    return {
      ...repository("KycRepo", {
        ensureAccount,
        lockAccount,
        updateAccount,
        setAccountStatus,
        claimCheck,
        insertSession,
        findSession,
        lockSession,
        updateSession,
        setReturnUrl,
        currentReturnUrl,
        insertDelivery
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}

const SandboxRow = Schema.Struct({
  id: Schema.String,
  address: Address,
  returnUrl: Schema.String,
  outcome: Schema.NullOr(SandboxOutcome),
  fullName: Schema.NullOr(Schema.String),
  documentNumberSealed: Schema.NullOr(Schema.Uint8ArrayFromSelf),
  completedAt: Schema.NullOr(Schema.DateFromSelf),
  expiresAt: Schema.DateFromSelf
})
export type SandboxRow = typeof SandboxRow.Type

/** The sandbox provider's records: what a real provider would keep on its side. */
export class SandboxRepo extends Effect.Service<SandboxRepo>()("app/SandboxRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const insert = SqlSchema.void({
      Request: Schema.Struct({
        id: Schema.String,
        address: Schema.String,
        returnUrl: Schema.String,
        createdAt: Schema.DateFromSelf,
        expiresAt: Schema.DateFromSelf
      }),
      execute: (row) => sql`INSERT INTO kyc_sandbox_sessions ${sql.insert(row)}`
    })

    const find = SqlSchema.findOne({
      Request: Schema.String,
      Result: SandboxRow,
      execute: (id) =>
        sql`SELECT id, address, return_url, outcome, full_name, document_number_sealed, completed_at, expires_at
            FROM kyc_sandbox_sessions WHERE id = ${id}`
    })

    /** Records the person's choice once, while the session is open; false otherwise. */
    const complete = (row: {
      readonly id: string
      readonly outcome: SandboxOutcome
      readonly fullName: string | null
      readonly documentNumberSealed: Uint8Array | null
      readonly now: Date
    }) =>
      sql`UPDATE kyc_sandbox_sessions
          SET outcome = ${row.outcome}, full_name = ${row.fullName},
              document_number_sealed = ${row.documentNumberSealed}, completed_at = ${row.now}
          WHERE id = ${row.id} AND outcome IS NULL AND expires_at > ${row.now}
          RETURNING id`.pipe(Effect.map((rows) => rows.length === 1))

    return repository("SandboxRepo", { insert, find, complete })
  })
}) {}
