import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

export default Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql`
    -- What the retention job looks unpaid orders up by (ORDER_RETENTION after they expired), and
    -- whether a payment of one ever got as far as a settlement (an unpaid order's can only have failed).
    CREATE INDEX orders_unpaid_expires_at_idx ON orders (expires_at) WHERE status IN ('open', 'expired');
    CREATE INDEX settlements_failed_order_idx ON settlements (order_id) WHERE status = 'failed';
  `
)
