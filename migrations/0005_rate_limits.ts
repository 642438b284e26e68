import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- Fixed one-minute windows per (limit, client); shared by every replica.
    CREATE TABLE rate_limit_hits (
      bucket text NOT NULL,
      window_start timestamptz NOT NULL,
      hits integer NOT NULL,
      PRIMARY KEY (bucket, window_start)
    );
    CREATE INDEX rate_limit_hits_window_idx ON rate_limit_hits (window_start);
  `
)
