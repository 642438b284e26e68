import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The agent wallet's address, derived from AGENT_WALLET_SEED the first time the loop decides the
    -- card and kept: reading a page of wallets then costs no key derivation (an elliptic-curve
    -- multiplication per card) and no replica has to remember every card's key.
    ALTER TABLE agent_strategies ADD COLUMN wallet text;
  `
)
