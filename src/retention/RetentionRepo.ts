/** SQL of the retention job: its lease and the bounded deletes. Infrastructure failures die here. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { repository } from "../storage/Sql.js"

/** The tables the job prunes, each with the rows that are past keeping at `cutoff`. */
export type Prunable =
  | "sessions"
  | "challenges"
  | "webhookDeliveries"
  | "events"
  | "eventStreams"
  | "eventReplicas"
  | "unpaidOrders"

export class RetentionRepo extends Effect.Service<RetentionRepo>()("app/RetentionRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * Takes or renews the lease of job `name` for `holder` (database time, so the replicas' clocks
     * need not agree): true when `holder` holds it for the next `seconds`, false while another
     * replica's lease runs.
     */
    const holdLease = (name: string, holder: string, seconds: number) =>
      sql`INSERT INTO job_leases (name, holder, expires_at)
          VALUES (${name}, ${holder}, now() + make_interval(secs => ${seconds}))
          ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, expires_at = EXCLUDED.expires_at
          WHERE job_leases.holder = EXCLUDED.holder OR job_leases.expires_at <= now()
          RETURNING name`.pipe(Effect.map((rows) => rows.length === 1))

    /** Gives up the lease of job `name` if `holder` holds it: the next replica to try takes it at once. */
    const releaseLease = (name: string, holder: string) =>
      sql`DELETE FROM job_leases WHERE name = ${name} AND holder = ${holder}`

    /**
     * Deletes at most `limit` rows of `table` that are past keeping at `cutoff`, in one short
     * statement, and answers how many went: expired sessions, challenges expired before `cutoff`
     * (a used one was used before it expired), webhook deliveries received before `cutoff`, events
     * written before `cutoff` (a user's oldest go first), the event-stream registrations of replicas
     * whose heartbeat is older than `cutoff` (they are gone), those replicas' heartbeats, and orders
     * never paid that expired before `cutoff` and no payment ever reached (one that did, failed, keeps
     * its order: the settlement refers to it).
     */
    const deleteBatch = (table: Prunable, cutoff: Date, limit: number) => {
      const doomed = {
        sessions: () => sql`SELECT ctid FROM sessions WHERE expires_at <= ${cutoff} LIMIT ${limit}`,
        challenges: () => sql`SELECT ctid FROM auth_challenges WHERE expires_at < ${cutoff} LIMIT ${limit}`,
        webhookDeliveries: () =>
          sql`SELECT ctid FROM kyc_webhook_deliveries WHERE received_at < ${cutoff} LIMIT ${limit}`,
        events: () => sql`SELECT ctid FROM events WHERE created_at < ${cutoff} LIMIT ${limit}`,
        eventStreams: () =>
          sql`SELECT c.ctid FROM event_connections c
              WHERE NOT EXISTS (SELECT 1 FROM event_replicas r WHERE r.id = c.replica AND r.seen_at >= ${cutoff})
              LIMIT ${limit}`,
        eventReplicas: () => sql`SELECT ctid FROM event_replicas WHERE seen_at < ${cutoff} LIMIT ${limit}`,
        // An unpaid order has no live settlement (one per order, set with its status): only failed ones.
        unpaidOrders: () =>
          sql`SELECT o.ctid FROM orders o
              WHERE o.status IN ('open', 'expired') AND o.expires_at < ${cutoff}
                AND NOT EXISTS (SELECT 1 FROM settlements s WHERE s.order_id = o.id AND s.status = 'failed')
              LIMIT ${limit}`
      }[table]()
      const name = {
        sessions: "sessions",
        challenges: "auth_challenges",
        webhookDeliveries: "kyc_webhook_deliveries",
        events: "events",
        eventStreams: "event_connections",
        eventReplicas: "event_replicas",
        unpaidOrders: "orders"
      }[table]
      return sql<{ deleted: number }>`
        WITH gone AS (DELETE FROM ${sql(name)} WHERE ctid = ANY(ARRAY(${doomed})) RETURNING 1)
        SELECT count(*)::int AS deleted FROM gone`.pipe(Effect.map(([row]) => row?.deleted ?? 0))
    }

    return repository("RetentionRepo", { holdLease, releaseLease, deleteBatch })
  })
}) {}
