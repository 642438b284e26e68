import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The journal of the transactions the relayer signed for settlements: recorded before each
    -- broadcast, kept until final. Its signed bytes let a transaction the chain lost (a reorg, a node
    -- restored from a snapshot) be sent again byte-identical, and let the relayer close a nonce gap.
    --   pending:  signed, broadcast or about to be, no receipt seen yet
    --   mined:    a receipt seen in block_number/block_hash, fewer than CHAIN_CONFIRMATIONS deep
    --   final:    that deep: never looked at again
    --   replaced: superseded by another signature of the same settlement (refused, or run out of gas)
    --   dropped:  can never be mined (its nonce went to another transaction, or its authorization expired)
    CREATE TABLE relayed_transactions (
      tx_hash text PRIMARY KEY,
      settlement_id bigint NOT NULL REFERENCES settlements (id),
      sender text NOT NULL,
      nonce bigint NOT NULL CHECK (nonce >= 0),
      raw_tx text NOT NULL,
      status text NOT NULL CHECK (status IN ('pending', 'mined', 'final', 'replaced', 'dropped')),
      block_number bigint,
      block_hash text,
      created_at timestamptz NOT NULL,
      checked_at timestamptz NOT NULL,
      CHECK ((status IN ('mined', 'final')) = (block_number IS NOT NULL AND block_hash IS NOT NULL))
    );
    -- One live transaction per nonce of a sender, and one live nonce per settlement: the database,
    -- not the process, makes sure a nonce never carries two settlements nor a settlement two nonces.
    CREATE UNIQUE INDEX relayed_one_per_nonce ON relayed_transactions (sender, nonce)
      WHERE status IN ('pending', 'mined');
    CREATE UNIQUE INDEX relayed_one_per_settlement ON relayed_transactions (settlement_id)
      WHERE status IN ('pending', 'mined');
    -- The tracker takes the least recently checked first.
    CREATE INDEX relayed_unfinal_idx ON relayed_transactions (checked_at) WHERE status IN ('pending', 'mined');
    CREATE INDEX relayed_by_settlement_idx ON relayed_transactions (settlement_id);
    -- When the settlement was last looked at by the reconciler: it takes the least recently checked first.
    ALTER TABLE settlements ADD COLUMN checked_at timestamptz;
  `
)
