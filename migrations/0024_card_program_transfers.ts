import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- A clearing's money is debited (taken from the card wallet under its allowance), a refund's
    -- credited (sent back to it); a clearing that could not be debited is owed, and repaid later.
    ALTER TABLE card_network_events DROP CONSTRAINT card_network_events_money_check;
    ALTER TABLE card_network_events ADD CONSTRAINT card_network_events_money_check
      CHECK (money IN ('debit_pending', 'credit_pending', 'debited', 'credited', 'owed', 'repaid'));
    CREATE INDEX card_network_events_money_idx ON card_network_events (seq)
      WHERE money IN ('debit_pending', 'credit_pending');

    -- The settlement account's next nonce, kept here so that every replica's sends from it (debits,
    -- refunds, permits) take their nonces one at a time, under this row's lock, in the transaction
    -- that records the signed transaction before it is broadcast.
    CREATE TABLE card_program_sender (
      sender text PRIMARY KEY,
      next_nonce bigint NOT NULL CHECK (next_nonce >= 0)
    );

    -- One transfer of USD1 per clearing (a debit: transferFrom the card wallet to the settlement
    -- account) or refund (a transfer back to the wallet): the event's id is the key, so no event
    -- moves money twice. "raw" is the signed transaction recorded before it was broadcast, "hash"
    -- its hash; a fee bump replaces both at the same nonce and keeps the earlier hashes (any one of
    -- them may be the one mined). "block" is where it was mined, on the chain as last read; a debit
    -- mined reverted is "reverted" (its clearing is owed), "final" once CHAIN_CONFIRMATIONS deep.
    CREATE TABLE card_program_transfers (
      event_id text PRIMARY KEY REFERENCES card_network_events (id),
      seq bigint GENERATED ALWAYS AS IDENTITY UNIQUE,
      kind text NOT NULL CHECK (kind IN ('debit', 'refund')),
      card_id text NOT NULL REFERENCES cards (id),
      wallet text NOT NULL,
      amount numeric(78, 0) NOT NULL CHECK (amount > 0),
      sender text NOT NULL,
      nonce bigint NOT NULL CHECK (nonce >= 0),
      hash text NOT NULL UNIQUE,
      raw text NOT NULL,
      earlier_hashes text[] NOT NULL DEFAULT '{}',
      bumps integer NOT NULL DEFAULT 0 CHECK (bumps >= 0),
      signed_at timestamptz NOT NULL,
      state text NOT NULL CHECK (state IN ('sent', 'mined', 'final', 'reverted')),
      mined_hash text,
      block bigint,
      created_at timestamptz NOT NULL,
      settled_at timestamptz,
      CHECK ((state = 'sent') = (block IS NULL) AND (block IS NULL) = (mined_hash IS NULL))
    );
    CREATE UNIQUE INDEX card_program_transfers_nonce_key ON card_program_transfers (sender, nonce);
    CREATE INDEX card_program_transfers_open_idx ON card_program_transfers (seq) WHERE state <> 'final';
    CREATE INDEX card_program_transfers_card_idx ON card_program_transfers (card_id, seq);

    -- A permit's nonce, for the nonce sequence it shares with the transfers.
    ALTER TABLE card_allowances ADD COLUMN tx_nonce bigint;

    -- What each card owes the program: a clearing that could not be debited adds its amount (its
    -- event), a repayment (the agent's transfer to the settlement account) takes it off. The card's
    -- "owed_micros" is their sum, kept on its row so that an authorization reads it under the row's
    -- lock; a card that owes anything declines as frozen (amount_owed).
    ALTER TABLE cards ADD COLUMN owed_micros bigint NOT NULL DEFAULT 0 CHECK (owed_micros >= 0);
    CREATE TABLE card_owed_entries (
      id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
      card_id text NOT NULL REFERENCES cards (id),
      amount_micros bigint NOT NULL CHECK (amount_micros <> 0),
      event_id text UNIQUE REFERENCES card_network_events (id),
      repayment_tx text UNIQUE,
      created_at timestamptz NOT NULL,
      CHECK ((amount_micros > 0) = (event_id IS NOT NULL) AND (event_id IS NULL) = (repayment_tx IS NOT NULL))
    );
    CREATE INDEX card_owed_entries_card_idx ON card_owed_entries (card_id, id);

    -- A card's money moved (a clearing debited, a refund credited) or is owed, repaid: its holder's event.
    ALTER TABLE events DROP CONSTRAINT events_type_check;
    ALTER TABLE events ADD CONSTRAINT events_type_check
      CHECK (type IN ('kyc', 'payment', 'refill', 'decision', 'strategy', 'authorization', 'money'));
  `
)
