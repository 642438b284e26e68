/**
 * The served pool's connections run every statement with parameters as a named (prepared)
 * statement (`storage/Database.ts`): PostgreSQL parses and plans it once per connection. A schema
 * change that alters a prepared statement's result columns (a migration another replica ran) does
 * not break the statement. The database is the real one.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Exit } from "effect"
import { TestDatabase } from "../support/TestDatabase.js"

layer(TestDatabase, { excludeTestServices: true })("prepared statements", (it) => {
  it.effect("a statement with parameters is prepared once per connection, then only run", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const [first, second, prepared] = yield* Effect.all([
        sql<{ n: number }>`SELECT ${41}::int + 1 AS n`,
        sql<{ n: number }>`SELECT ${41}::int + 1 AS n`,
        // no parameters: run as before, unnamed (it may hold several statements)
        sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`
      ]).pipe(sql.withTransaction) // one connection
      expect([first, second]).toEqual([[{ n: 42 }], [{ n: 42 }]])
      expect(prepared.filter((row) => row.statement === "SELECT $1::int + 1 AS n")).toHaveLength(1)
    })
  )

  it.effect("a batch of many parameters runs unnamed: its text changes with its size", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const values = Array.from({ length: 40 }, (_, i) => i)
      const [sum, prepared] = yield* Effect.all([
        sql<{ total: number }>`SELECT (${sql.join(" + ", false)(values.map((value) => sql`${value}::int`))}) AS total`,
        sql<{ statement: string }>`SELECT statement FROM pg_prepared_statements`
      ]).pipe(sql.withTransaction)
      expect(sum).toEqual([{ total: 780 }])
      expect(prepared.filter((row) => row.statement.includes("$40"))).toEqual([])
    })
  )

  it.effect("a migration that changes a prepared statement's columns: the statement is prepared anew", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`CREATE TABLE prepared_probe (id int PRIMARY KEY)`
      yield* sql`INSERT INTO prepared_probe VALUES (1)`
      const read = sql<Record<string, number>>`SELECT * FROM prepared_probe WHERE id = ${1}`
      // Sequential statements take the pool's most recently idle connection: the one that prepared it.
      expect(yield* read).toEqual([{ id: 1 }])
      expect(yield* read).toEqual([{ id: 1 }])
      yield* sql`ALTER TABLE prepared_probe ADD COLUMN added int NOT NULL DEFAULT 7`
      // outside a transaction it runs again at once
      expect(yield* read).toEqual([{ id: 1, added: 7 }])

      // inside one, the stale statement fails the transaction (as any failed statement does); the next run works
      yield* sql`SELECT * FROM prepared_probe WHERE id = ${1} AND added = ${7}`
      yield* sql`ALTER TABLE prepared_probe ADD COLUMN later int NOT NULL DEFAULT 8`
      const inTransaction = yield* Effect.exit(
        sql`SELECT * FROM prepared_probe WHERE id = ${1} AND added = ${7}`.pipe(sql.withTransaction)
      )
      expect(Exit.isFailure(inTransaction)).toBe(true)
      expect(yield* sql`SELECT * FROM prepared_probe WHERE id = ${1} AND added = ${7}`).toEqual([
        { id: 1, added: 7, later: 8 }
      ])
    })
  )
})
