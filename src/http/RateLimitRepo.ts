/** SQL for the rate-limit counters that the replicas share. Infrastructure failures die here. */
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { repository } from "../storage/Sql.js"

/** New hits of one (limit, client) bucket in one window. */
export interface Hits {
  readonly bucket: string
  readonly windowStart: number
  readonly hits: number
}

export class RateLimitRepo extends Effect.Service<RateLimitRepo>()("app/RateLimitRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * Adds a replica's new hits to the shared counts in one statement and answers every bucket's
     * total as all replicas have written it. Rows are locked in key order, so replicas that add to
     * the same buckets at once wait for each other instead of deadlocking.
     */
    const addHits = (batch: ReadonlyArray<Hits>) =>
      sql<{ bucket: string; windowStart: Date; hits: number }>`
        INSERT INTO rate_limit_hits (bucket, window_start, hits)
        SELECT bucket, window_start, hits
        FROM unnest(${batch.map((b) => b.bucket)}::text[],
                    ${batch.map((b) => new Date(b.windowStart).toISOString())}::timestamptz[],
                    ${batch.map((b) => b.hits)}::integer[]) AS added (bucket, window_start, hits)
        ORDER BY bucket, window_start
        ON CONFLICT (bucket, window_start) DO UPDATE SET hits = rate_limit_hits.hits + EXCLUDED.hits
        RETURNING bucket, window_start, hits`

    /** Drops windows that ended long ago, keeping the table small. */
    const dropWindowsBefore = (before: Date) => sql`DELETE FROM rate_limit_hits WHERE window_start < ${before}`

    return repository("RateLimitRepo", { addHits, dropWindowsBefore })
  })
}) {}
