import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    CREATE TABLE orders (
      id text PRIMARY KEY,
      amount text NOT NULL,
      amount_micros bigint NOT NULL CHECK (amount_micros > 0 AND amount_micros <= 1000000000000),
      description text NOT NULL CHECK (length(description) BETWEEN 1 AND 500),
      status text NOT NULL CHECK (status IN ('open', 'settling', 'paid', 'expired')),
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      payer text,
      tx text,
      paid_at timestamptz,
      CHECK ((status = 'paid') = (payer IS NOT NULL AND tx IS NOT NULL AND paid_at IS NOT NULL))
    );
    CREATE INDEX orders_payer_paid_idx ON orders (payer, paid_at DESC, id DESC) WHERE status = 'paid';

    -- One row per payment attempt that passed verification. The chain enforces a nonce once per
    -- payer; these constraints enforce one live or successful settlement per order, across replicas.
    CREATE TABLE settlements (
      id bigserial PRIMARY KEY,
      order_id text NOT NULL REFERENCES orders (id),
      payer text NOT NULL,
      nonce text NOT NULL,
      amount_atomic numeric(78, 0) NOT NULL,
      valid_before bigint NOT NULL,
      payload jsonb NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'broadcast', 'succeeded', 'failed')),
      tx_hash text,
      raw_tx text,
      error_reason text,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      CONSTRAINT settlements_payer_nonce_key UNIQUE (payer, nonce)
    );
    CREATE UNIQUE INDEX settlements_one_live_per_order ON settlements (order_id)
      WHERE status IN ('pending', 'broadcast', 'succeeded');
    CREATE INDEX settlements_unfinished_idx ON settlements (updated_at) WHERE status IN ('pending', 'broadcast');
  `
)
