import { execFileSync, spawn } from "node:child_process"
import { existsSync, readFileSync, rmSync, statSync } from "node:fs"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import pg from "pg"
import { freePort, PASSWORD_FILE, startEmbeddedPostgres } from "../../src/embedded/EmbeddedPostgres.js"
import { isAlive } from "../../src/embedded/EmbeddedServer.js"
import { runnableBinaries } from "../../src/embedded/PostgresBinaries.js"
import { killProcessesMentioning, processesMentioning, runToExit, temporaryDirectory } from "../support/process.js"
import { eventually } from "../support/wait.js"

const asRoot = process.getuid?.() === 0

const query = (url: Redacted.Redacted<string>, text: string) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: Redacted.value(url) })
    await client.connect()
    try {
      return (await client.query(text)).rows
    } finally {
      await client.end()
    }
  })

/** Starts the server on `dataDir`, runs `statement` in its database `app`, and stops it. */
const startedOnce = (dataDir: string, statement: string) =>
  Effect.scoped(
    Effect.flatMap(startEmbeddedPostgres({ dir: dataDir, database: "app", unsafeFast: true }), (url) =>
      query(url, statement)
    )
  )

/** The error code of a login with `url`, which must fail. */
const loginFails = (url: string) =>
  Effect.promise(async () => {
    const client = new pg.Client({ connectionString: url })
    try {
      await client.connect()
      await client.end()
      return "logged in"
    } catch (error) {
      return String((error as { code?: unknown }).code)
    }
  })

const postmasterPid = (dataDir: string) => {
  const file = path.join(dataDir, "postmaster.pid")
  return existsSync(file) ? Number(readFileSync(file, "utf8").split("\n")[0]) : undefined
}

/** A folder whose servers are killed (if a test left any) before it is removed. */
const testFolder = Effect.gen(function* () {
  const dir = yield* temporaryDirectory("card-service-pg-test-")
  yield* Effect.addFinalizer(() => killProcessesMentioning(dir))
  return dir
})

/** Runs the PostgreSQL binary on `dataDir` outside of any scope or watchdog, as a crashed run would leave it. */
const leaveServerRunning = (dataDir: string) =>
  Effect.gen(function* () {
    const binaries = yield* runnableBinaries(asRoot)
    const user = asRoot
      ? {
          uid: Number(execFileSync("id", ["-u", "postgres"], { encoding: "utf8" })),
          gid: Number(execFileSync("id", ["-g", "postgres"], { encoding: "utf8" }))
        }
      : {}
    const args = ["-D", dataDir, "-p", String(yield* freePort), "-c", "listen_addresses=127.0.0.1"]
    const child = spawn(binaries.postgres, [...args, "-c", "unix_socket_directories="], { ...user, stdio: "ignore" })
    child.unref()
    yield* eventually(
      `the server started by hand (pid ${child.pid}) to write its postmaster.pid`,
      Effect.sync(() => postmasterPid(dataDir)),
      (pid) => pid === child.pid,
      { every: "50 millis" }
    )
    return child.pid!
  })

describe("embedded PostgreSQL", () => {
  it.scopedLive(
    "serves a UTF-8 database and stops with its scope, its watchdog too",
    () =>
      Effect.gen(function* () {
        const dir = yield* testFolder
        const dataDir = path.join(dir, "data")
        const pid = yield* Effect.scoped(
          Effect.gen(function* () {
            const url = yield* startEmbeddedPostgres({ dir: dataDir, database: "app_test", unsafeFast: true })
            const [row] = yield* query(
              url,
              "SELECT current_database() AS db, current_user AS who, current_setting('server_encoding') AS encoding"
            )
            expect(row).toEqual({ db: "app_test", who: "app", encoding: "UTF8" })
            const pid = postmasterPid(dataDir)!
            // the server and its watchdog, both started with the data folder on their command line
            expect(processesMentioning(dataDir).map((p) => p.pid)).toContain(pid)
            expect(
              processesMentioning(dataDir).filter((p) => p.commandLine.includes("card-service-watchdog"))
            ).toHaveLength(1)
            return pid
          })
        )
        expect(isAlive(pid)).toBe(false)
        expect(processesMentioning(dataDir)).toEqual([])
      }),
    300_000
  )

  it.scopedLive(
    "a start stops the server a previous run left on the data directory, and keeps the data",
    () =>
      Effect.gen(function* () {
        const dir = yield* testFolder
        const dataDir = path.join(dir, "data")
        yield* startedOnce(dataDir, "CREATE TABLE kept (word text); INSERT INTO kept VALUES ('still here')")
        const leftover = yield* leaveServerRunning(dataDir)
        const url = yield* startEmbeddedPostgres({ dir: dataDir, database: "app", unsafeFast: true })
        expect(isAlive(leftover)).toBe(false)
        expect(postmasterPid(dataDir)).not.toBe(leftover)
        expect(yield* query(url, "SELECT word FROM kept")).toEqual([{ word: "still here" }])
      }),
    300_000
  )

  it.scopedLive(
    "admits only the service: a random password in a 0600 file, which another OS user can neither read nor guess",
    () =>
      Effect.gen(function* () {
        const dir = yield* testFolder
        const dataDir = path.join(dir, "data")
        const url = yield* startEmbeddedPostgres({ dir: dataDir, database: "app", unsafeFast: true })
        const passwordFile = path.join(dir, PASSWORD_FILE)
        const file = statSync(passwordFile)
        expect(file.mode & 0o777).toBe(0o600)
        expect(file.uid).toBe(process.getuid?.())
        expect(statSync(dataDir).mode & 0o777).toBe(0o700)
        const password = readFileSync(passwordFile, "utf8").trim()
        expect(password).toMatch(/^[A-Za-z0-9_-]{32}$/)
        expect(decodeURIComponent(new URL(Redacted.value(url)).password)).toBe(password)
        const port = new URL(Redacted.value(url)).port
        // Over TCP the server does not know which OS user connects: only the password admits.
        expect(yield* loginFails(`postgres://app:app@127.0.0.1:${port}/app`)).toBe("28P01")
        expect(yield* loginFails(`postgres://postgres:postgres@127.0.0.1:${port}/postgres`)).toBe("28P01")

        if (!asRoot) return // only root can act as another user; the modes above say the rest
        // Plain node as nobody: the checkout (and its node_modules) may sit in a folder nobody cannot enter.
        const attempt = `
          try { require("fs").readFileSync(${JSON.stringify(passwordFile)}); console.log("read") }
          catch (e) { console.log(e.code) }`
        const asNobody = yield* runToExit("runuser", ["-u", "nobody", "--", process.execPath, "-e", attempt])
        expect(asNobody.code, asNobody.output).toBe(0)
        expect(asNobody.output.trim()).toBe("EACCES")
      }),
    300_000
  )

  it.scopedLive(
    "a data directory made with the fixed password gets a random one on its next start",
    () =>
      Effect.gen(function* () {
        const dir = yield* testFolder
        const dataDir = path.join(dir, "data")
        // As every data directory was before passwords were random.
        yield* startedOnce(dataDir, "ALTER ROLE app WITH PASSWORD 'app'; CREATE TABLE kept (word text)")
        rmSync(path.join(dir, PASSWORD_FILE))
        const url = yield* startEmbeddedPostgres({ dir: dataDir, database: "app", unsafeFast: true })
        const password = readFileSync(path.join(dir, PASSWORD_FILE), "utf8").trim()
        expect(password).toMatch(/^[A-Za-z0-9_-]{32}$/)
        expect(yield* query(url, "SELECT count(*)::int AS n FROM kept")).toEqual([{ n: 0 }])
        const port = new URL(Redacted.value(url)).port
        expect(yield* loginFails(`postgres://app:app@127.0.0.1:${port}/app`)).toBe("28P01")
      }),
    300_000
  )

  it.scopedLive("an invalid database name is refused before anything starts", () =>
    Effect.gen(function* () {
      const dir = yield* testFolder
      const error = yield* Effect.flip(startEmbeddedPostgres({ dir: path.join(dir, "data"), database: "no-dash" }))
      expect(error).toMatchObject({ _tag: "EmbeddedServerError", server: "PostgreSQL", path: path.join(dir, "data") })
      expect(error.message).toBe(`PostgreSQL did not start (${path.join(dir, "data")}): invalid database name no-dash`)
      expect(existsSync(path.join(dir, "data"))).toBe(false)
    })
  )
})
