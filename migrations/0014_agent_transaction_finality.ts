import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The agent's transactions (sale, purchase, send) followed to finality like the relayer's
    -- settlements: who signed them with which nonce, and once seen the block they were mined in.
    -- Their signed bytes (raw) let one the chain lost (a reorg) be sent again byte-identical.
    --   pending: no receipt seen yet (or sent again after the chain lost it)
    --   mined:   in block_number/block_hash, fewer than CHAIN_CONFIRMATIONS deep
    --   final:   that deep (or reverted, or recorded before this migration): never looked at again
    --   dropped: lost by the chain and can never be mined again (reverted when re-mined, or its
    --            nonce went to another transaction)
    ALTER TABLE agent_transactions
      ADD COLUMN sender text,
      ADD COLUMN nonce bigint CHECK (nonce >= 0),
      ADD COLUMN finality text NOT NULL DEFAULT 'final' CHECK (finality IN ('pending', 'mined', 'final', 'dropped')),
      ADD COLUMN block_number bigint,
      ADD COLUMN block_hash text,
      ADD COLUMN checked_at timestamptz,
      ADD CHECK (finality <> 'mined' OR (block_number IS NOT NULL AND block_hash IS NOT NULL));
    ALTER TABLE agent_transactions ALTER COLUMN finality SET DEFAULT 'pending';
    -- The tracker takes the least recently checked first.
    CREATE INDEX agent_transactions_unfinal_idx ON agent_transactions (checked_at)
      WHERE finality IN ('pending', 'mined');
  `
)
