import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- A stuck relayer transaction is replaced with the same nonce and a higher fee. Every signed
    -- version stays in the journal: whichever of them is mined is the settlement's transaction.
    --   bumped: an earlier signature of the live row's nonce (same settlement, lower fee); it may
    --           still be mined until one version is, and is then the one promoted to the live row
    ALTER TABLE relayed_transactions DROP CONSTRAINT relayed_transactions_status_check;
    ALTER TABLE relayed_transactions ADD CONSTRAINT relayed_transactions_status_check
      CHECK (status IN ('pending', 'mined', 'final', 'replaced', 'dropped', 'bumped'));
    CREATE INDEX relayed_versions_idx ON relayed_transactions (sender, nonce) WHERE status = 'bumped';
  `
)
