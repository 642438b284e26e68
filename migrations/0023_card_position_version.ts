import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- Counts the changes of what a card's authorizations are decided on (its holds, what cleared,
    -- its controls): a new authorization is decided on a snapshot read without the card's lock and
    -- stored only if the count is still the one it read (AuthorizationRepo).
    ALTER TABLE cards ADD COLUMN position_version bigint NOT NULL DEFAULT 0;
  `
)
