import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The agent's strategy of each card (a user has at most one card), and the card's place in the
    -- agent loop's schedule: replicas claim due cards with FOR UPDATE SKIP LOCKED and a lease.
    CREATE TABLE agent_strategies (
      card_id text PRIMARY KEY REFERENCES cards (id),
      targets jsonb NOT NULL,
      weekly_spend_usd double precision NOT NULL CHECK (weekly_spend_usd >= 0 AND weekly_spend_usd <= 100000),
      time_zone text NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      -- When the agent wallet was given its starting funds (devnet faucet), once.
      funded_at timestamptz,
      -- The next interval the card is due in, and who holds it until when.
      due_at timestamptz NOT NULL,
      lease_owner text,
      lease_until timestamptz,
      -- No new trade before this (a transaction in doubt, or a refill's cooldown).
      trade_after timestamptz
    );
    CREATE INDEX agent_strategies_due_idx ON agent_strategies (due_at);
    CREATE INDEX agent_strategies_created_idx ON agent_strategies (created_at, card_id);

    -- Every decision the loop stored. (card_id, due_at) is the idempotency key of an interval: one
    -- decision per card per interval, whichever replica made it.
    CREATE TABLE agent_decisions (
      id bigserial PRIMARY KEY,
      card_id text NOT NULL REFERENCES cards (id),
      due_at timestamptz NOT NULL,
      at timestamptz NOT NULL,
      action text NOT NULL CHECK (action IN ('none', 'refill', 'hold', 'rebalance')),
      rule text NOT NULL,
      symbol text,
      buy_symbol text,
      usd double precision CHECK (usd > 0),
      need_usd double precision NOT NULL,
      horizon timestamptz NOT NULL,
      spread double precision,
      reason text NOT NULL,
      status text NOT NULL
        CHECK (status IN ('logged', 'dry-run', 'executing', 'executed', 'failed', 'unknown', 'blocked')),
      error text,
      -- The replica that decided it (its lease owner id), for operators.
      replica text NOT NULL,
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      CONSTRAINT agent_decisions_card_due_key UNIQUE (card_id, due_at)
    );
    CREATE INDEX agent_decisions_card_idx ON agent_decisions (card_id, id DESC);
    CREATE INDEX agent_decisions_unfinished_idx ON agent_decisions (updated_at) WHERE status = 'executing';

    -- Each transaction of an executing decision, recorded after signing and before broadcast.
    CREATE TABLE agent_transactions (
      decision_id bigint NOT NULL REFERENCES agent_decisions (id),
      step text NOT NULL CHECK (step IN ('sell', 'buy', 'send')),
      hash text NOT NULL,
      raw text NOT NULL,
      -- Atomic units moved: the tokens sold, the USD1 spent on a purchase, or the USD1 sent.
      amount numeric(78, 0) NOT NULL CHECK (amount > 0),
      status text NOT NULL CHECK (status IN ('broadcast', 'succeeded', 'failed')),
      created_at timestamptz NOT NULL,
      updated_at timestamptz NOT NULL,
      PRIMARY KEY (decision_id, step)
    );
  `
)
