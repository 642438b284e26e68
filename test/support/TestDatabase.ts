import * as Reactivity from "@effect/experimental/Reactivity"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { inject } from "vitest"
import { sqlLayer } from "../../src/Database.js"

/** A fresh, empty database on the test server, dropped when the scope closes. */
export const temporaryDatabaseUrl = Effect.gen(function* () {
  const adminUrl = inject("adminDatabaseUrl")
  const admin = yield* PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 })
  const name = `test_${Date.now()}_${Math.floor(Math.random() * 1e9)}`
  yield* Effect.acquireRelease(admin`CREATE DATABASE ${admin(name)}`, () =>
    Effect.orDie(admin`DROP DATABASE IF EXISTS ${admin(name)} WITH (FORCE)`)
  )
  const url = new URL(adminUrl)
  url.pathname = `/${name}`
  return url.toString()
}).pipe(Effect.provide(Reactivity.layer), Effect.orDie)

/** A freshly created, migrated database for one test file, dropped when the layer closes. */
export const TestDatabase = Layer.unwrapScoped(Effect.map(temporaryDatabaseUrl, (url) => sqlLayer(Redacted.make(url))))
