/**
 * The PostgreSQL client (`@effect/sql-pg`) and the migrator.
 * `DATABASE_URL` selects a server; without it an embedded PostgreSQL runs under `<DATA_DIR>/pg`.
 * Migrations in the top-level `migrations/` folder run before the client is handed out.
 *
 * Every database call is bounded: opening a connection and waiting for a free one in the pool
 * (`DATABASE_CONNECT_TIMEOUT`), a statement on the server (`DATABASE_STATEMENT_TIMEOUT`, also for
 * lock waits) and, for a server that stops answering altogether, the wait for its reply (the
 * statement timeout plus a margin). Migrations run on a connection of their own without the
 * statement bound: rewriting a large table may take longer.
 */
import { existsSync, readdirSync } from "node:fs"
import path from "node:path"
import { fileURLToPath } from "node:url"
import * as Reactivity from "@effect/experimental/Reactivity"
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Config, Context, Duration, Effect, Layer, Option, Redacted, String as Str } from "effect"
import pg from "pg"
import { startEmbeddedPostgres } from "../embedded/EmbeddedPostgres.js"
import { AppConfig, durationConfig } from "../runtime/Config.js"
import { SERVICE_NAME } from "../runtime/ServiceInfo.js"

/** The nearest migrations/ folder above this module: the repository's, beside src/ (and dist/). */
const migrationsDir = (() => {
  let dir = path.dirname(fileURLToPath(import.meta.url))
  while (!existsSync(path.join(dir, "migrations"))) {
    if (path.dirname(dir) === dir) throw new Error(`no migrations/ folder above ${import.meta.url}`)
    dir = path.dirname(dir)
  }
  return path.join(dir, "migrations")
})()

/**
 * Each migration file, imported when it is to run. The import's path is a template so that esbuild
 * bundles every file of migrations/ into npm start's build (scripts/start.mjs), which has no import().
 */
const migrations = () =>
  PgMigrator.fromGlob(
    Object.fromEntries(
      readdirSync(migrationsDir).map((file) => [file, () => import(`../../migrations/${file}`)] as const)
    )
  )

const APPLICATION_NAME = SERVICE_NAME
const MAX_CONNECTIONS = 10
/** How much longer than the server's statement timeout the client waits for any reply. */
const READ_MARGIN = Duration.seconds(2)

export const databaseSettings = Config.all({
  connectTimeout: durationConfig("DATABASE_CONNECT_TIMEOUT", "3 seconds"),
  statementTimeout: durationConfig("DATABASE_STATEMENT_TIMEOUT", "5 seconds")
})

/**
 * A name conversion done once per name: every row of every result has each of its column names
 * converted (2.4 µs for an order's 11 columns, 0.5 µs from the map). Bounded, as JSON keys of
 * `jsonb` values are converted too.
 */
const convertedOnce = (convert: (name: string) => string) => {
  const converted = new Map<string, string>()
  return (name: string) => {
    let result = converted.get(name)
    if (result === undefined) {
      result = convert(name)
      if (converted.size < 10_000) converted.set(name, result)
    }
    return result
  }
}

const names = {
  transformResultNames: convertedOnce(Str.snakeToCamel),
  transformQueryNames: convertedOnce(Str.camelToSnake)
}

/**
 * Runs the pending migrations on a connection of their own, closed afterwards. Replicas starting
 * at once take turns (a session advisory lock): the migrator's own table is created without one.
 */
const migrate = (url: Redacted.Redacted<string>, connectTimeout: Duration.Duration) =>
  Layer.effectDiscard(
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`SELECT pg_advisory_lock(hashtext('card-service migrations'))`
      yield* PgMigrator.run({ loader: migrations() })
    }).pipe(
      Effect.provide(
        PgClient.layer({ url, maxConnections: 1, applicationName: `${APPLICATION_NAME} migrations`, connectTimeout })
      ),
      Effect.provide(NodeContext.layer),
      Effect.scoped
    )
  )

/**
 * How busy the served connection pool is, read when the metrics are scraped; and connections of
 * their own for what a pooled one cannot do (LISTEN holds its connection for as long as it listens).
 */
export class DatabasePool extends Context.Tag("app/DatabasePool")<
  DatabasePool,
  {
    readonly usage: Effect.Effect<{ readonly total: number; readonly idle: number; readonly waiting: number }>
    /** A new, unconnected client of the same server, named `applicationName`; the caller connects and ends it. */
    readonly dedicated: (applicationName: string) => pg.Client
  }
>() {}

/**
 * A statement's name by its text, for every pooled connection of the process: PostgreSQL parses and
 * plans a named statement once per connection and then only binds and runs it (the SQL text, its
 * parse and its plan were most of the server's work for a one-row read). Bounded: texts past the
 * bound (an `IN` list whose length varies, say) run unnamed, parsed each time. A statement of many
 * parameters is a batch whose text changes with its size (each size would hold a name and a plan on
 * every connection) and whose parse is a small part of its work: it runs unnamed.
 */
const MAX_NAMED_STATEMENTS = 1000
const MAX_NAMED_PARAMETERS = 32
const statementNames = new Map<string, string>()
let statementsNamed = 0

const statementName = (text: string) => {
  const known = statementNames.get(text)
  if (known !== undefined || statementNames.size >= MAX_NAMED_STATEMENTS) return known
  const name = `card_${statementsNamed++}`
  statementNames.set(text, name)
  return name
}

/** PostgreSQL's refusal to run a prepared statement whose result columns a schema change altered. */
const isStaleStatement = (error: unknown) =>
  (error as { code?: unknown } | null)?.code === "0A000" &&
  (error as { routine?: unknown }).routine === "RevalidateCachedQuery"

type QueryCallback = (error: Error | null, result?: unknown) => void

/**
 * The pool's connections run each statement with parameters as a named (prepared) statement. A
 * statement prepared before a migration changed its result's columns (`SELECT *` on a table another
 * replica altered) is refused by the server: its text gets a new name, so every connection prepares
 * it again, and outside a transaction it is run again at once.
 */
class PreparingClient extends pg.Client {
  // biome-ignore lint/suspicious/noExplicitAny: pg's query() has a dozen overloads; this one only adds a name
  override query(...args: Array<any>): any {
    const [text, values, callback] = args as [unknown, unknown, unknown]
    if (
      typeof text !== "string" ||
      !Array.isArray(values) ||
      values.length === 0 ||
      values.length > MAX_NAMED_PARAMETERS ||
      typeof callback !== "function"
    ) {
      return super.query(...(args as Parameters<pg.Client["query"]>))
    }
    const name = statementName(text)
    if (name === undefined) return super.query(text, values, callback as QueryCallback)
    const inTransaction = (this as unknown as { _txStatus: string | null })._txStatus !== "I"
    return super.query({ name, text, values }, (error: Error | null, result: unknown) => {
      if (error === null || !isStaleStatement(error)) return (callback as QueryCallback)(error, result)
      if (statementNames.get(text) === name) statementNames.delete(text)
      if (inTransaction) return (callback as QueryCallback)(error)
      this.query(text, values, callback)
    })
  }
}

/** The served client: a pool whose every wait is bounded (the migrations already reached the server). */
const boundedClient = (
  url: Redacted.Redacted<string>,
  settings: { readonly connectTimeout: Duration.Duration; readonly statementTimeout: Duration.Duration }
) =>
  Layer.scopedContext(
    Effect.gen(function* () {
      const statementMs = Duration.toMillis(settings.statementTimeout)
      const pool = yield* Effect.acquireRelease(
        Effect.sync(
          () =>
            new pg.Pool({
              connectionString: Redacted.value(url),
              max: MAX_CONNECTIONS,
              Client: PreparingClient,
              application_name: APPLICATION_NAME,
              // Connecting, and waiting for a pooled connection when all are busy.
              connectionTimeoutMillis: Duration.toMillis(settings.connectTimeout),
              // The server cancels a statement (lock waits included) past this...
              statement_timeout: statementMs,
              // ...and the client gives up on a server that does not answer at all.
              query_timeout: statementMs + Duration.toMillis(READ_MARGIN),
              keepAlive: true
            })
        ),
        (pool) => Effect.promise(() => pool.end()).pipe(Effect.timeoutOption("2 seconds"))
      )
      // An idle connection that breaks is dropped by the pool; the next statement opens another.
      pool.on("error", () => {})
      const client = yield* PgClient.fromPool({
        acquire: Effect.succeed(pool),
        applicationName: APPLICATION_NAME,
        ...names
      })
      const usage = Effect.sync(() => ({ total: pool.totalCount, idle: pool.idleCount, waiting: pool.waitingCount }))
      const dedicated = (applicationName: string) =>
        new pg.Client({
          connectionString: Redacted.value(url),
          application_name: `${APPLICATION_NAME} ${applicationName}`,
          connectionTimeoutMillis: Duration.toMillis(settings.connectTimeout),
          query_timeout: statementMs + Duration.toMillis(READ_MARGIN),
          keepAlive: true
        })
      return Context.make(PgClient.PgClient, client).pipe(
        Context.add(SqlClient.SqlClient, client),
        Context.add(DatabasePool, { usage, dedicated })
      )
    })
  ).pipe(Layer.provide(Reactivity.layer))

/** Client + migrations for a known URL (tests build one per throwaway database). */
export const sqlLayer = (url: Redacted.Redacted<string>) =>
  Layer.unwrapEffect(
    Effect.map(databaseSettings, (settings) =>
      boundedClient(url, settings).pipe(Layer.provide(migrate(url, settings.connectTimeout)))
    )
  )

export const SqlLive = Layer.unwrapScoped(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const url = Option.isSome(config.databaseUrl)
      ? config.databaseUrl.value
      : yield* startEmbeddedPostgres({ dir: path.join(config.dataDir, "pg"), database: "app" })
    return sqlLayer(url)
  })
)
