/** Helpers shared by the repositories: what a database failure means at their boundary. */
import { type SqlClient, SqlError } from "@effect/sql"
import { Effect } from "effect"

export const isSqlError = (error: unknown): error is SqlError.SqlError => error instanceof SqlError.SqlError

/** A unique violation of the named constraint (or unique index). */
export const isUniqueViolation = (error: SqlError.SqlError, constraint: string) => {
  const cause = error.cause as { code?: string; constraint?: string } | undefined
  return cause?.code === "23505" && cause.constraint === constraint
}

/** Runs an effect in one transaction; a database fault is a defect, domain errors pass through. */
export const transactionally =
  (sql: SqlClient.SqlClient) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    sql.withTransaction(effect).pipe(Effect.catchIf(isSqlError, Effect.die))
