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

/**
 * SQLSTATE classes and codes that say the database could not do the work now, not that the
 * statement was wrong: connection exceptions (08), insufficient resources (53), operator
 * intervention (57: a terminated backend, a server shutting down, a statement timeout), and the
 * transaction conflicts worth retrying (40001, 40P01).
 */
const UNAVAILABLE_SQLSTATE = /^(08|53|57)|^40001$|^40P01$/

/**
 * Whether a failure means "the database is unavailable": a SqlError whose cause is a network or
 * driver failure (no SQLSTATE: refused, reset, a connect, acquire or read timeout) or one of the
 * SQLSTATEs above. Any other SQLSTATE is the server refusing a statement: a fault of ours.
 */
export const isDatabaseUnavailable = (error: unknown): boolean => {
  if (!isSqlError(error)) return false
  // The server's own errors carry a severity and a SQLSTATE; network and driver errors do not.
  const cause = error.cause as { severity?: unknown; code?: unknown } | undefined
  if (typeof cause?.severity !== "string") return true
  return typeof cause.code === "string" && UNAVAILABLE_SQLSTATE.test(cause.code)
}

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
