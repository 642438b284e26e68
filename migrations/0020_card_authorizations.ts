import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The holder's controls live on the card's row: an authorization locks that row (FOR UPDATE)
    -- and reads them in the same statement. Limits are millionths of a dollar; NULL is no limit.
    -- number_hash (HMAC-SHA256 of the number under a server key) finds a card by the number a
    -- terminal typed; it is filled for older cards at start-up, hence nullable.
    ALTER TABLE cards
      ADD COLUMN number_hash bytea CHECK (length(number_hash) = 32),
      ADD COLUMN frozen boolean NOT NULL DEFAULT false,
      ADD COLUMN per_transaction_micros bigint CHECK (per_transaction_micros >= 0),
      ADD COLUMN daily_micros bigint CHECK (daily_micros >= 0),
      ADD COLUMN monthly_micros bigint CHECK (monthly_micros >= 0),
      ADD COLUMN blocked_mcc text[] NOT NULL DEFAULT '{}';
    CREATE UNIQUE INDEX cards_number_hash_key ON cards (number_hash);
    -- The balance follower reads new cards' balances by this.
    CREATE INDEX cards_created_at_idx ON cards (created_at);
    -- The network names a card by the token its issuer gave it.
    CREATE UNIQUE INDEX cards_issuer_ref_key ON cards (issuer_ref);

    -- Faces a holder replaced (a lost card): the network still knows them, and they decline
    -- card_canceled. Sealed like the card's own (the same card id in the AAD).
    CREATE TABLE card_replaced_faces (
      issuer text NOT NULL,
      issuer_ref text NOT NULL,
      card_id text NOT NULL REFERENCES cards (id),
      number_hash bytea CHECK (length(number_hash) = 32),
      number_sealed bytea NOT NULL,
      cvv_sealed bytea NOT NULL,
      last4 text NOT NULL CHECK (last4 ~ '^[0-9]{4}$'),
      expiry text NOT NULL CHECK (expiry ~ '^(0[1-9]|1[0-2])/[0-9]{2}$'),
      replaced_at timestamptz NOT NULL,
      PRIMARY KEY (issuer_ref)
    );
    CREATE UNIQUE INDEX card_replaced_faces_number_hash_key ON card_replaced_faces (number_hash);
    CREATE INDEX card_replaced_faces_card_idx ON card_replaced_faces (card_id);

    -- Every card wallet's USD1 as the block follower last read it (atomic units), and how far the
    -- follower has looked: one row. An authorization trusts the balances while checked_at is
    -- recent (CARD_BALANCE_MAX_AGE), and makes no JSON-RPC call of its own.
    CREATE TABLE card_wallet_balances (
      address text PRIMARY KEY,
      usd1 numeric(78, 0) NOT NULL CHECK (usd1 >= 0),
      block bigint NOT NULL,
      updated_at timestamptz NOT NULL
    );
    CREATE TABLE card_balance_follower (
      id boolean PRIMARY KEY DEFAULT true CHECK (id),
      block bigint NOT NULL,
      checked_at timestamptz NOT NULL,
      refreshed_at timestamptz NOT NULL
    );

    -- One row per authorization the network asked about (its transaction token is the id), approved
    -- or declined. held_micros is the open hold; cleared_micros what clearings moved out of it.
    -- An authorization is decided while its card's row is locked: holds never exceed what was
    -- available, whichever replica decides.
    CREATE TABLE card_authorizations (
      id text PRIMARY KEY,
      seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
      card_id text NOT NULL REFERENCES cards (id),
      address text NOT NULL,
      network text NOT NULL,
      -- The network's id of the request message: a re-delivery of it gets the stored answer.
      message_id text NOT NULL,
      approved boolean NOT NULL,
      reason text CHECK ((approved AND reason IS NULL) OR (NOT approved AND reason IS NOT NULL)),
      requested_micros bigint NOT NULL CHECK (requested_micros >= 0),
      approved_micros bigint NOT NULL CHECK (approved_micros >= 0),
      held_micros bigint NOT NULL CHECK (held_micros >= 0),
      cleared_micros bigint NOT NULL DEFAULT 0 CHECK (cleared_micros >= 0),
      available_after_micros bigint,
      status text NOT NULL CHECK (status IN ('declined', 'pending', 'settled', 'reversed', 'expired')),
      merchant_name text NOT NULL,
      merchant_mcc text NOT NULL CHECK (merchant_mcc ~ '^[0-9]{4}$'),
      merchant_city text,
      merchant_country text NOT NULL,
      channel text NOT NULL CHECK (channel IN ('in_person', 'online')),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      hold_expires_at timestamptz NOT NULL
    );
    CREATE INDEX card_authorizations_held_idx ON card_authorizations (card_id, hold_expires_at) WHERE held_micros > 0;
    CREATE INDEX card_authorizations_spent_idx ON card_authorizations (card_id, created_at) WHERE approved;
    CREATE INDEX card_authorizations_address_idx ON card_authorizations (address, seq);

    -- Every message after an authorization (an increment, a reversal, a clearing, a refund, an
    -- expiry), once each: its id is the network's event token (an increment's: its message id).
    -- Clearings and refunds are money to move (debit pending, credit pending: moved by the next
    -- step, the settlement); force posts (a clearing of a transaction never authorized here) and
    -- refunds (a return is a transaction of its own) name no authorization.
    CREATE TABLE card_network_events (
      id text PRIMARY KEY,
      seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
      transaction_id text NOT NULL,
      authorization_id text REFERENCES card_authorizations (id),
      card_id text NOT NULL REFERENCES cards (id),
      address text NOT NULL,
      kind text NOT NULL CHECK (kind IN ('increment', 'reversal', 'clearing', 'refund', 'expiry')),
      amount_micros bigint NOT NULL CHECK (amount_micros >= 0),
      approved boolean,
      reason text,
      money text CHECK (money IN ('debit_pending', 'credit_pending')),
      merchant_name text,
      merchant_mcc text,
      merchant_city text,
      merchant_country text,
      created_at timestamptz NOT NULL
    );
    CREATE INDEX card_network_events_authorization_idx ON card_network_events (authorization_id);
    CREATE INDEX card_network_events_pending_idx ON card_network_events (card_id) WHERE money = 'debit_pending';
    CREATE INDEX card_network_events_address_idx ON card_network_events (address, seq) WHERE kind IN ('clearing', 'refund');

    -- The sandbox network's own records (what a processor keeps on its side): each transaction it
    -- started, its card and merchant, and the events it sent since.
    CREATE TABLE card_sandbox_transactions (
      token text PRIMARY KEY,
      card_token text NOT NULL,
      last_four text NOT NULL,
      merchant json NOT NULL,
      channel text NOT NULL,
      authorized_cents bigint NOT NULL,
      cleared_cents bigint NOT NULL DEFAULT 0,
      events json NOT NULL DEFAULT '[]',
      status text NOT NULL CHECK (status IN ('PENDING', 'SETTLED', 'VOIDED', 'EXPIRED')),
      created_at timestamptz NOT NULL
    );

    ALTER TABLE events DROP CONSTRAINT events_type_check;
    ALTER TABLE events ADD CONSTRAINT events_type_check
      CHECK (type IN ('kyc', 'payment', 'refill', 'decision', 'strategy', 'authorization'));
  `
)
