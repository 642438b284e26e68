import * as Reactivity from "@effect/experimental/Reactivity"
import { SqlClient } from "@effect/sql"
import { PgClient } from "@effect/sql-pg"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Option, Redacted, String as Str } from "effect"
import { AuthRepo } from "../../src/auth/AuthRepo.js"
import { sqlLayer } from "../../src/storage/Database.js"
import { temporaryDatabaseUrl } from "../support/TestDatabase.js"

// The repository over a pool of one connection, so a statement after the challenge's runs on the
// very connection the challenge was written on.
const OneConnection = Layer.unwrapScoped(
  Effect.map(temporaryDatabaseUrl, (url) =>
    AuthRepo.Default.pipe(
      Layer.provideMerge(
        PgClient.layer({
          url: Redacted.make(url),
          maxConnections: 1,
          transformQueryNames: Str.camelToSnake,
          transformResultNames: Str.snakeToCamel
        })
      ),
      Layer.provide(Reactivity.layer),
      // the migrations, before the one connection opens
      Layer.provide(sqlLayer(Redacted.make(url)))
    )
  )
)

const challengeRow = (nonce: string, now: number) => ({
  nonce,
  address: "0x70997970c51812dc3a010c7d01b50E44FC6FE3e5",
  message: `a challenge with nonce ${nonce}`,
  issuedAt: new Date(now),
  expiresAt: new Date(now + 10 * 60 * 1000)
})

layer(OneConnection)("a challenge's write", (it) => {
  it.effect("commits without waiting for its WAL flush, and only its own transaction does", () =>
    Effect.gen(function* () {
      const repo = yield* AuthRepo
      const sql = yield* SqlClient.SqlClient
      const now = Date.now()
      // Durable commits on this connection, whatever the server's default (the embedded test
      // server runs with synchronous_commit off).
      yield* sql`SET synchronous_commit = on`
      // Inside a transaction the setting is seen: it is in force when that transaction commits.
      const inside = yield* sql.withTransaction(
        Effect.zipRight(repo.insertChallenge(challengeRow("insideTransaction01", now)), sql`SHOW synchronous_commit`)
      )
      expect(inside).toEqual([{ synchronousCommit: "off" }])
      // On its own the statement is its own transaction; the connection's next statement (a
      // session's, say) commits durably again.
      yield* repo.insertChallenge(challengeRow("onItsOwn0123456789", now))
      expect(yield* sql`SHOW synchronous_commit`).toEqual([{ synchronousCommit: "on" }])
      const stored = yield* repo.findChallenge("onItsOwn0123456789")
      expect(Option.map(stored, (row) => row.message)).toEqual(Option.some("a challenge with nonce onItsOwn0123456789"))
    })
  )
})
