/**
 * Counts the statements a piece of code sends through the `@effect/sql` client: every statement
 * it executes (through the client's statement transformer), and BEGIN plus COMMIT or ROLLBACK for
 * each transaction (a savepoint and its release inside one), which the client sends on its own.
 *
 *     Layer.provide(countingSql(counter)) over the database layer; `counter.count` reads the total.
 */
import { SqlClient, Statement } from "@effect/sql"
import { Context, Effect, Layer } from "effect"

export class SqlCounter {
  private statements = 0
  get count() {
    return this.statements
  }
  add(n: number) {
    this.statements += n
  }
}

/** `database` with its SQL client counted into `counter` (its other services as they are). */
export const countingSql = <A, E, R>(counter: SqlCounter, database: Layer.Layer<A | SqlClient.SqlClient, E, R>) =>
  Layer.map(database, (context) => {
    const sql = Context.get(context, SqlClient.SqlClient)
    const counted = new Proxy(sql, {
      get: (target, property, receiver) =>
        property === "withTransaction"
          ? <B, E2, R2>(effect: Effect.Effect<B, E2, R2>) =>
              Effect.zipRight(
                Effect.sync(() => counter.add(2)),
                target.withTransaction(effect)
              )
          : Reflect.get(target, property, receiver)
    })
    return Context.add(context, SqlClient.SqlClient, counted)
  }).pipe(
    Layer.merge(
      Statement.setTransformer((statement) =>
        Effect.sync(() => {
          counter.add(1)
          return statement
        })
      )
    )
  )
