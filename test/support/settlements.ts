import { SqlClient } from "@effect/sql"
import { Effect, Schedule } from "effect"

/**
 * Waits (up to 10 s) until the order's settlement is recorded as broadcast: its transaction is then
 * signed and sent, and waits for a block when the devnet does not mine on its own.
 */
export const awaitBroadcast = (orderId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql`SELECT 1 FROM settlements WHERE order_id = ${orderId} AND status = 'broadcast'`.pipe(
      Effect.filterOrFail(
        (rows) => rows.length === 1,
        () => `the settlement of order ${orderId} was not broadcast within 10 seconds`
      ),
      Effect.retry(Schedule.spaced("20 millis").pipe(Schedule.upTo("10 seconds"))),
      Effect.orDie,
      Effect.asVoid
    )
  )
