/**
 * SQL for events: publishing (in the writer's transaction), reading after an id, and the open-stream
 * registry. Infrastructure failures die here (retention is the retention job's: RetentionRepo).
 *
 * Ids: a user's row in `event_sequences` is updated by every statement that publishes for the user
 * and stays locked until the writer's transaction ends, so two writers of one user take turns: ids
 * are dense, never reused once committed, and commit in id order. The NOTIFY sent with them is
 * delivered at commit, so a replica that is told about id N can read every id up to N.
 */
import { SqlClient, SqlSchema, type Statement } from "@effect/sql"
import { Effect, Schema } from "effect"
import { repository } from "../storage/Sql.js"
import type { StoredEventType } from "./Api.js"

/** The channel every replica listens on. Payloads: `e <address> <id>` (new events up to id), `c <stream id>` (close). */
export const EVENTS_CHANNEL = "card_service_events"

export interface NewEventRow {
  readonly address: string
  readonly type: StoredEventType
  /** The event's JSON data, encoded. */
  readonly data: unknown
}

export const StoredEvent = Schema.Struct({
  address: Schema.String,
  id: Schema.NumberFromString,
  type: Schema.Literal("kyc", "payment", "refill", "decision", "strategy", "authorization", "money"),
  /** The data's JSON text. */
  data: Schema.String,
  /** How long ago it was written, by the database's clock. */
  ageSeconds: Schema.Number
})
export type StoredEvent = typeof StoredEvent.Type

export class EventRepo extends Effect.Service<EventRepo>()("app/EventRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * The CTEs that store events, numbered per user in the order given, and notify the replicas
     * (once per user, with the newest id), for a statement of the caller's: only when `onlyIf` holds
     * (a condition on the statement's other CTEs), and only once the statement reads `notified`
     * (a SELECT in a WITH runs only when referenced). Events of an address that is not a user (a
     * payer who never signed in) are not stored.
     */
    const publishing = (rows: ReadonlyArray<NewEventRow>, onlyIf: Statement.Fragment = sql`true`) =>
      sql`input AS (
            SELECT e.value ->> 'address' AS address, e.value ->> 'type' AS type, e.value -> 'data' AS data, e.n
            FROM json_array_elements(${JSON.stringify(rows)}::json) WITH ORDINALITY AS e(value, n)
            WHERE EXISTS (SELECT 1 FROM users u WHERE u.address = e.value ->> 'address') AND ${onlyIf}
          ), taken AS (
            INSERT INTO event_sequences AS s (address, last_id)
            SELECT address, count(*) FROM input GROUP BY address ORDER BY address
            ON CONFLICT (address) DO UPDATE SET last_id = s.last_id + EXCLUDED.last_id
            RETURNING address, last_id
          ), numbered AS (
            SELECT i.address, i.type, i.data,
                   t.last_id - count(*) OVER (PARTITION BY i.address)
                     + row_number() OVER (PARTITION BY i.address ORDER BY i.n) AS id
            FROM input i JOIN taken t USING (address)
          ), stored AS (
            INSERT INTO events (address, id, type, data, created_at)
            SELECT address, id, type, data, clock_timestamp() FROM numbered
            RETURNING address, id
          ), notified AS (
            SELECT pg_notify(${EVENTS_CHANNEL}, 'e ' || address || ' ' || max(id)) FROM stored GROUP BY address
          )`

    /** Stores events in one statement (`publishing`); runs in the caller's transaction when there is one. */
    const publish = (rows: ReadonlyArray<NewEventRow>) =>
      rows.length === 0 ? Effect.void : sql`WITH ${publishing(rows)} SELECT count(*) FROM notified`.pipe(Effect.asVoid)

    /** The user's newest id (0 before any) and whether the event after `after` is still stored. */
    const position = SqlSchema.single({
      Request: Schema.Struct({ address: Schema.String, after: Schema.Number }),
      Result: Schema.Struct({ lastId: Schema.NumberFromString, nextKept: Schema.Boolean }),
      execute: ({ address, after }) => sql`
        SELECT COALESCE((SELECT last_id FROM event_sequences WHERE address = ${address}), 0)::text AS last_id,
               EXISTS (SELECT 1 FROM events WHERE address = ${address} AND id = ${after + 1}) AS next_kept`
    })

    /** For each user, up to `limit` events after the id given, in id order. */
    const after = SqlSchema.findAll({
      Request: Schema.Struct({
        cursors: Schema.Array(Schema.Struct({ address: Schema.String, after: Schema.Number })),
        limit: Schema.Number
      }),
      Result: StoredEvent,
      execute: ({ cursors, limit }) => sql`
        SELECT c.address, e.id::text AS id, e.type, e.data::text AS data,
               extract(epoch FROM clock_timestamp() - e.created_at)::float8 AS age_seconds
        FROM jsonb_to_recordset(${JSON.stringify(cursors)}::jsonb) AS c(address text, after bigint)
        CROSS JOIN LATERAL (
          SELECT id, type, data, created_at FROM events
          WHERE address = c.address AND id > c.after ORDER BY id LIMIT ${limit}
        ) e
        ORDER BY c.address, e.id`
    })

    /** Each user's newest id: what a replica compares its streams with, should a notification be lost. */
    const lastIds = SqlSchema.findAll({
      Request: Schema.Array(Schema.String),
      Result: Schema.Struct({ address: Schema.String, lastId: Schema.NumberFromString }),
      execute: (addresses) =>
        sql`SELECT address, last_id::text AS last_id FROM event_sequences WHERE address = ANY(${addresses}::text[])`
    })

    /**
     * Registers a stream and drops the user's oldest beyond `max` open ones (whichever replica holds
     * them: each is told by a notification). Answers the streams dropped. One user's registrations take
     * turns (a transaction-scoped advisory lock per user): each one's statement sees every earlier one,
     * so streams opened at once leave `max` registered, never more.
     */
    const openStream = (stream: {
      readonly id: string
      readonly address: string
      readonly replica: string
      readonly max: number
    }) =>
      sql`SELECT pg_advisory_xact_lock(hashtextextended(${`event-streams:${stream.address}`}, 0))`.pipe(
        Effect.zipRight(sql<{ id: string }>`
        WITH beyond AS (
          SELECT id FROM event_connections WHERE address = ${stream.address}
          ORDER BY opened_at DESC, id DESC OFFSET ${Math.max(0, stream.max - 1)}
        ), dropped AS (
          DELETE FROM event_connections c USING beyond WHERE c.id = beyond.id RETURNING c.id
        ), opened AS (
          INSERT INTO event_connections (id, address, replica, opened_at)
          VALUES (${stream.id}, ${stream.address}, ${stream.replica}, clock_timestamp())
        )
        SELECT id::text AS id, pg_notify(${EVENTS_CHANNEL}, 'c ' || id) FROM dropped`),
        Effect.map((rows) => rows.map((row) => row.id)),
        sql.withTransaction
      )

    const closeStream = (id: string) => sql`DELETE FROM event_connections WHERE id = ${id}`

    /** This replica (and so its streams) is alive: one row, whatever the number of its streams. */
    const heartbeat = (replica: string) =>
      sql`INSERT INTO event_replicas (id, seen_at) VALUES (${replica}, now())
          ON CONFLICT (id) DO UPDATE SET seen_at = now()`

    /** This replica stops: its stream registrations and its heartbeat go (they count against no user's cap any more). */
    const forgetReplica = (replica: string) =>
      sql`WITH streams AS (DELETE FROM event_connections WHERE replica = ${replica})
          DELETE FROM event_replicas WHERE id = ${replica}`

    /** Of the given sessions (SHA-256 hashes, hex), the ones that still exist, and whether each expired. */
    const liveSessions = (sessionIds: ReadonlyArray<string>) =>
      sql<{ sessionId: string; expired: boolean }>`
        SELECT encode(token_hash, 'hex') AS session_id, expires_at <= now() AS expired FROM sessions
        WHERE token_hash = ANY(SELECT decode(h, 'hex') FROM unnest(${sessionIds}::text[]) AS h)`.pipe(
        Effect.map((rows) => new Map(rows.map((row) => [row.sessionId, { expired: row.expired }])))
      )

    return {
      ...repository("EventRepo", {
        publish,
        position,
        after,
        lastIds,
        openStream,
        closeStream,
        heartbeat,
        forgetReplica,
        liveSessions
      }),
      publishing
    }
  })
}) {}
