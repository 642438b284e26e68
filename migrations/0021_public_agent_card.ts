import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- The first card that set a strategy is no longer what anonymous agent reads describe (only the
    -- card AGENT_PUBLIC_CARD names is): nothing reads the strategies in the order they were created.
    DROP INDEX agent_strategies_created_idx;
  `
)
