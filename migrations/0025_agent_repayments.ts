import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- A refill of a card that owes the program first repays it: the agent wallet sends USD1 straight
    -- to the settlement account (step "repay", journaled like the others), then the rest to the card.
    -- "repay_micros" is the part of the decision's "usd" that repays, exact to the millionth (what
    -- the card owed when it was decided), NULL when nothing was owed.
    ALTER TABLE agent_transactions DROP CONSTRAINT agent_transactions_step_check;
    ALTER TABLE agent_transactions ADD CONSTRAINT agent_transactions_step_check
      CHECK (step IN ('approve', 'sell', 'buy', 'send', 'repay'));
    ALTER TABLE agent_decisions ADD COLUMN repay_micros bigint CHECK (repay_micros > 0);
    -- Repayments sent and not yet seen mined or reverted: few at any time. A new decision leaves
    -- them out of what it repays, and the tracker settles those whose decision ended without them.
    CREATE INDEX agent_transactions_repaying_idx ON agent_transactions (decision_id)
      WHERE step = 'repay' AND status = 'broadcast';
  `
)
