import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The close reference of each stock token: the last price observed while the token was in the
    -- regular session. Replicas share it; a row only moves to a newer observation.
    CREATE TABLE close_refs (
      chain_id bigint NOT NULL,
      token text NOT NULL CHECK (token ~ '^0x[0-9a-fA-F]{40}$'),
      symbol text NOT NULL,
      price double precision NOT NULL CHECK (price > 0 AND price < 'Infinity'),
      observed_at timestamptz NOT NULL,
      feed_updated_at timestamptz NOT NULL,
      PRIMARY KEY (chain_id, token)
    );
  `
)
