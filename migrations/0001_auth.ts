import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    CREATE TABLE users (
      address text PRIMARY KEY CHECK (address ~ '^0x[0-9a-fA-F]{40}$'),
      created_at timestamptz NOT NULL
    );

    CREATE TABLE auth_challenges (
      nonce text PRIMARY KEY,
      address text NOT NULL,
      message text NOT NULL,
      issued_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      used_at timestamptz
    );
    CREATE INDEX auth_challenges_expires_at_idx ON auth_challenges (expires_at);

    -- Only the SHA-256 of a bearer token is stored.
    CREATE TABLE sessions (
      token_hash bytea PRIMARY KEY CHECK (length(token_hash) = 32),
      address text NOT NULL REFERENCES users (address),
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL
    );
    CREATE INDEX sessions_address_idx ON sessions (address);
  `
)
