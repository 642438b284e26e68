import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- A job that one replica of the deployment runs at a time holds its lease: the holder renews
    -- it at each run, another replica takes it over once it has expired (database time).
    CREATE TABLE job_leases (
      name text PRIMARY KEY,
      holder text NOT NULL,
      expires_at timestamptz NOT NULL
    );

    -- What the retention job looks rows up by.
    CREATE INDEX sessions_expires_at_idx ON sessions (expires_at);
    CREATE INDEX kyc_webhook_deliveries_received_at_idx ON kyc_webhook_deliveries (received_at);
  `
)
