import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- A payment reads its payer's settlements of the asset twice (before the check and at the
    -- reservation): the newest one's id and the unsettled ones. Through these two indexes each read
    -- costs the same whatever the payer's history; through (payer, nonce) it read every settlement
    -- the payer ever made.
    CREATE INDEX settlements_payer_asset_idx ON settlements (payer, lower(payload -> 'accepted' ->> 'asset'), id);
    CREATE INDEX settlements_payer_unsettled_idx ON settlements (payer) WHERE status IN ('pending', 'broadcast');
  `
)
