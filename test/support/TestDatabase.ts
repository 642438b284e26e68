import * as Reactivity from "@effect/experimental/Reactivity"
import { PgClient } from "@effect/sql-pg"
import { Context, Effect, Layer, Redacted } from "effect"
import pg from "pg"
import { inject } from "vitest"
import { sqlLayer } from "../../src/storage/Database.js"
import { startTcpProxy, type TcpProxy } from "./TcpProxy.js"

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

/** Runs one statement on its own connection: for tests that look at a service's database from outside. */
export const queryDatabase = <A = Record<string, unknown>>(
  databaseUrl: string,
  text: string,
  values: ReadonlyArray<unknown> = []
) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: databaseUrl })
    await client.connect()
    try {
      return (await client.query(text, [...values])).rows as Array<A>
    } finally {
      await client.end()
    }
  })

/** A freshly created, migrated database for one test file, dropped when the layer closes. */
export const TestDatabase = Layer.unwrapScoped(Effect.map(temporaryDatabaseUrl, (url) => sqlLayer(Redacted.make(url))))

/** The proxy between the server and its database, for tests that stall or cut the database. */
export class DatabaseProxy extends Context.Tag("test/DatabaseProxy")<DatabaseProxy, TcpProxy>() {}

/** `TestDatabase` reached through a TCP proxy, offered as `DatabaseProxy`. */
export const ProxiedTestDatabase = Layer.unwrapScoped(
  Effect.gen(function* () {
    const url = yield* temporaryDatabaseUrl
    const upstream = new URL(url)
    const proxy = yield* startTcpProxy({ host: upstream.hostname, port: Number(upstream.port || 5432) })
    return Layer.merge(sqlLayer(Redacted.make(proxy.url(url))), Layer.succeed(DatabaseProxy, proxy))
  })
)
