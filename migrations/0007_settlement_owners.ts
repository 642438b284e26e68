import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- An EIP-3009 validBefore is a uint256: bigint cannot hold every signed value.
    ALTER TABLE settlements ALTER COLUMN valid_before TYPE numeric(78, 0);

    -- Each replica's heartbeat. A settlement is worked on by the replica that reserved it (its
    -- owner); once the owner's heartbeat is stale the owner is dead and the reconciler takes over.
    CREATE TABLE merchant_replicas (
      id text PRIMARY KEY,
      heartbeat_at timestamptz NOT NULL
    );
    ALTER TABLE settlements ADD COLUMN owner text;
  `
)
