import * as Reactivity from "@effect/experimental/Reactivity"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { inject } from "vitest"
import { sqlLayer } from "../../src/Database.js"

/** A freshly created, migrated database for one test file, dropped when the layer closes. */
export const TestDatabase = Layer.unwrapScoped(
  Effect.gen(function* () {
    const adminUrl = inject("adminDatabaseUrl")
    const admin = yield* PgClient.make({ url: Redacted.make(adminUrl), maxConnections: 1 })
    const name = `test_${Date.now()}_${Math.floor(Math.random() * 1e9)}`
    yield* Effect.acquireRelease(admin`CREATE DATABASE ${admin(name)}`, () =>
      Effect.orDie(admin`DROP DATABASE IF EXISTS ${admin(name)} WITH (FORCE)`)
    )
    const url = new URL(adminUrl)
    url.pathname = `/${name}`
    return sqlLayer(Redacted.make(url.toString()))
  }).pipe(Effect.orDie)
).pipe(Layer.provide(Reactivity.layer))
