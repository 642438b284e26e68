/**
 * The PostgreSQL client (`@effect/sql-pg`) and the migrator.
 * `DATABASE_URL` selects a server; without it an embedded PostgreSQL runs under `<DATA_DIR>/pg`.
 * Migrations in the top-level `migrations/` folder run before the client is handed out.
 */
import path from "node:path"
import { fileURLToPath } from "node:url"
import { NodeContext } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { PgClient, PgMigrator } from "@effect/sql-pg"
import { Effect, Layer, Option, type Redacted, String as Str } from "effect"
import { AppConfig } from "./Config.js"
import { startEmbeddedPostgres } from "./EmbeddedPostgres.js"

const migrationsDir = fileURLToPath(new URL("../migrations", import.meta.url))

/** Any number the replicas agree on: the advisory lock that serialises their migrations. */
const MIGRATION_LOCK = 4_207_311_001

/**
 * Pending migrations, one replica at a time: replicas starting together on a fresh database would
 * otherwise race to create the migrations table. The lock is a session lock on a connection of its
 * own, released (with the connection) whatever the migrations' outcome.
 */
const MigratorLive = Layer.effectDiscard(
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const connection = yield* sql.reserve
    const lock = (fn: "pg_advisory_lock" | "pg_advisory_unlock") =>
      connection.execute(`SELECT ${fn}($1)`, [MIGRATION_LOCK], undefined)
    yield* Effect.acquireRelease(lock("pg_advisory_lock"), () => Effect.ignore(lock("pg_advisory_unlock")))
    yield* PgMigrator.run({ loader: PgMigrator.fromFileSystem(migrationsDir) })
  }).pipe(Effect.scoped)
).pipe(Layer.provide(NodeContext.layer))

/** Client + migrations for a known URL (tests build one per throwaway database). */
export const sqlLayer = (url: Redacted.Redacted<string>) =>
  MigratorLive.pipe(
    Layer.provideMerge(
      PgClient.layer({
        url,
        maxConnections: 10,
        applicationName: "card-service",
        transformResultNames: Str.snakeToCamel,
        transformQueryNames: Str.camelToSnake
      })
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
