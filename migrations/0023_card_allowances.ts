import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- What the USD1 token allows the card program's settlement account to take from each card wallet,
    -- read by the balance follower with the balance, at the same block.
    ALTER TABLE card_wallet_balances ADD COLUMN allowance numeric(78, 0) NOT NULL DEFAULT 0 CHECK (allowance >= 0);

    -- The spending allowances a holder asked for (an EIP-2612 permit for the settlement account
    -- "spender", of "cap" USD1 atomic units, submittable and in force until "deadline"), one row per
    -- request. A request becomes the card's allowance once its signature is submitted ("tx_hash" and
    -- "tx_raw": the signed transaction, recorded before it was sent), and is "seen_at" once the token
    -- was read allowing the cap. The card's allowance is its latest submitted row.
    CREATE TABLE card_allowances (
      id text PRIMARY KEY,
      card_id text NOT NULL REFERENCES cards (id),
      owner text NOT NULL,
      spender text NOT NULL,
      cap numeric(78, 0) NOT NULL CHECK (cap > 0),
      permit_nonce numeric(78, 0) NOT NULL,
      deadline timestamptz NOT NULL,
      requested_at timestamptz NOT NULL,
      submitted_at timestamptz,
      tx_hash text,
      tx_raw text,
      seen_at timestamptz,
      CHECK ((submitted_at IS NULL) = (tx_hash IS NULL) AND (tx_hash IS NULL) = (tx_raw IS NULL))
    );
    CREATE INDEX card_allowances_card_idx ON card_allowances (card_id, submitted_at DESC NULLS LAST, requested_at DESC);
    CREATE INDEX card_allowances_unseen_idx ON card_allowances (owner) WHERE submitted_at IS NOT NULL AND seen_at IS NULL;
  `
)
