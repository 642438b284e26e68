/** Helpers shared by the repositories: what a database failure means at their boundary. */
import { type SqlClient, SqlError } from "@effect/sql"
import { Cause, Effect, ParseResult } from "effect"

const isSqlError = (error: unknown): error is SqlError.SqlError => error instanceof SqlError.SqlError

type InfrastructureFailure = SqlError.SqlError | ParseResult.ParseError | Cause.NoSuchElementException

/**
 * A failure of the database, of decoding its rows, or a statement that must return a row and did
 * not: a fault of ours or of the server, never the caller's.
 */
const isInfrastructureFailure = (error: unknown): error is InfrastructureFailure =>
  isSqlError(error) || ParseResult.isParseError(error) || Cause.isNoSuchElementException(error)

/** A unique violation of the named constraint (or unique index). */
export const isUniqueViolation = (error: SqlError.SqlError, constraint: string) => {
  const cause = error.cause as { code?: string; constraint?: string } | undefined
  return cause?.code === "23505" && cause.constraint === constraint
}

type Method = (...args: never[]) => Effect.Effect<unknown, unknown, unknown>

export type RepositoryMethods<M extends Record<string, Method>> = {
  readonly [K in keyof M]: (
    ...args: Parameters<M[K]>
  ) => Effect.Effect<
    Effect.Effect.Success<ReturnType<M[K]>>,
    Exclude<Effect.Effect.Error<ReturnType<M[K]>>, InfrastructureFailure>,
    Effect.Effect.Context<ReturnType<M[K]>>
  >
}

/**
 * A repository's methods as its callers see them: each runs in a span `<name>.<method>`, and a
 * database or row-decoding failure becomes a defect (a 500, logged), while domain failures a method
 * maps itself (a unique violation that means something) pass through.
 */
export const repository = <M extends Record<string, Method>>(name: string, methods: M): RepositoryMethods<M> =>
  Object.fromEntries(
    Object.entries(methods).map(([method, run]) => [
      method,
      (...args: never[]) =>
        run(...args).pipe(Effect.catchIf(isInfrastructureFailure, Effect.die), Effect.withSpan(`${name}.${method}`))
    ])
  ) as unknown as RepositoryMethods<M>

/** Runs an effect in one transaction; a database fault is a defect, domain errors pass through. */
export const transactionally =
  (sql: SqlClient.SqlClient) =>
  <A, E, R>(effect: Effect.Effect<A, E, R>) =>
    sql.withTransaction(effect).pipe(Effect.catchIf(isSqlError, Effect.die))
