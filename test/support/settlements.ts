import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { eventually } from "./wait.js"

/**
 * Waits until the order's settlement is recorded as broadcast: its transaction is then signed and
 * sent, and waits for a block when the devnet does not mine on its own.
 */
export const awaitBroadcast = (orderId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    eventually(
      `the settlement of order ${orderId} to be broadcast`,
      sql`SELECT 1 FROM settlements WHERE order_id = ${orderId} AND status = 'broadcast'`,
      (rows) => rows.length === 1,
      { every: "20 millis" }
    )
  ).pipe(Effect.asVoid)
