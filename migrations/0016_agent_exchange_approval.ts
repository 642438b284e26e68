import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- A wallet's first trade of a token approves the exchange first, in a transaction of its own
    -- (the nonce before the trade's). Journaled like the steps, so that a reorg taking both away
    -- sends both again, in nonce order: without it the trade would wait behind a missing nonce.
    -- Its amount is what the trade needed approved (the approval itself is unlimited).
    ALTER TABLE agent_transactions DROP CONSTRAINT agent_transactions_step_check;
    ALTER TABLE agent_transactions ADD CONSTRAINT agent_transactions_step_check
      CHECK (step IN ('approve', 'sell', 'buy', 'send'));
  `
)
