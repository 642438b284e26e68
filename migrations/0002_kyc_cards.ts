import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- Each user's identity-check state and current provider session. Every state change happens
    -- while holding this row's lock (SELECT ... FOR UPDATE).
    CREATE TABLE kyc_accounts (
      address text PRIMARY KEY REFERENCES users (address),
      status text NOT NULL CHECK (status IN ('none', 'pending', 'approved', 'declined', 'duplicate')),
      provider text,
      session_id text,
      -- Last reconciliation call to the provider: at most one per user per few seconds, across replicas.
      checked_at timestamptz,
      updated_at timestamptz NOT NULL
    );

    -- Provider sessions: status only moves forward (pending -> one terminal result).
    CREATE TABLE kyc_sessions (
      provider text NOT NULL,
      session_id text NOT NULL,
      address text NOT NULL REFERENCES users (address),
      url text NOT NULL,
      return_url text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'approved', 'declined', 'duplicate', 'expired')),
      event_at timestamptz,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      CONSTRAINT kyc_sessions_pkey PRIMARY KEY (provider, session_id)
    );
    CREATE INDEX kyc_sessions_address_idx ON kyc_sessions (address);

    -- Every webhook delivery processed; the primary key makes each one count once.
    CREATE TABLE kyc_webhook_deliveries (
      provider text NOT NULL,
      delivery_id text NOT NULL,
      session_id text,
      received_at timestamptz NOT NULL,
      CONSTRAINT kyc_webhook_deliveries_pkey PRIMARY KEY (provider, delivery_id)
    );

    -- The built-in sandbox provider's own records (what a real provider keeps on its side).
    CREATE TABLE kyc_sandbox_sessions (
      id text PRIMARY KEY,
      address text NOT NULL,
      return_url text NOT NULL,
      outcome text CHECK (outcome IN ('approve', 'decline', 'duplicate', 'abandon')),
      full_name text,
      document_number_sealed bytea,
      created_at timestamptz NOT NULL,
      expires_at timestamptz NOT NULL,
      completed_at timestamptz
    );

    -- Cards: number and CVV only sealed (AES-256-GCM); one card per user and per identity document
    -- (document_hash = HMAC-SHA256 of the normalised document number under a server key).
    CREATE TABLE cards (
      id text PRIMARY KEY,
      address text NOT NULL REFERENCES users (address),
      issuer text NOT NULL,
      issuer_ref text NOT NULL,
      holder text NOT NULL,
      number_sealed bytea NOT NULL,
      cvv_sealed bytea NOT NULL,
      last4 text NOT NULL CHECK (last4 ~ '^[0-9]{4}$'),
      expiry text NOT NULL CHECK (expiry ~ '^(0[1-9]|1[0-2])/[0-9]{2}$'),
      document_hash bytea NOT NULL CHECK (length(document_hash) = 32),
      created_at timestamptz NOT NULL,
      CONSTRAINT cards_address_key UNIQUE (address),
      CONSTRAINT cards_document_hash_key UNIQUE (document_hash)
    );
  `
)
