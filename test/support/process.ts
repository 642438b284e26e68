import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { chmodSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { type Duration, Effect, Option, Schedule } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import type { Devnet } from "../../src/chain/Devnet.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { startWatchdog } from "../../src/embedded/EmbeddedServer.js"
import { eventuallySucceeds } from "./wait.js"

export interface ServiceProcess {
  readonly child: ChildProcess
  readonly baseUrl: string
  readonly output: () => string
  /** Resolves with the exit code (null when killed by a signal). */
  readonly exited: Effect.Effect<number | null>
}

/**
 * A temporary folder (removed when the scope closes, also when the test fails) that the embedded
 * server's `postgres` user can enter when we run as root.
 */
export const temporaryDirectory = (prefix: string) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(path.join(tmpdir(), prefix))
      chmodSync(dir, 0o755)
      return dir
    }),
    (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
  )

/** What runs the service: the TypeScript sources through tsx. */
const TSX_MAIN: ReadonlyArray<string> = ["--import", "tsx", "src/main.ts"]

/**
 * Spawns `src/main.ts` as `npm start` does (or node with `args`), with exactly the environment given
 * (plus PATH/HOME), from `cwd`. When the scope closes it is stopped (SIGTERM, then SIGKILL) if still running; a watchdog
 * stops it if the test process dies first.
 */
export const spawnService = (env: Record<string, string>, cwd = process.cwd(), args = TSX_MAIN) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      let output = ""
      const child = spawn(process.execPath, args, {
        cwd,
        env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
        stdio: ["ignore", "pipe", "pipe"]
      })
      child.stdout?.on("data", (chunk: Buffer) => {
        output += chunk.toString()
      })
      child.stderr?.on("data", (chunk: Buffer) => {
        output += chunk.toString()
      })
      const exited = Effect.async<number | null>((resume) => {
        if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.succeed(child.exitCode))
        child.once("exit", (code) => resume(Effect.succeed(code)))
      })
      const guard = yield* startWatchdog({
        pid: child.pid ?? 0,
        signal: "SIGTERM",
        grace: "20 seconds",
        label: `card-service test service ${cwd}`
      }).pipe(Effect.orDie)
      const service: ServiceProcess = {
        child,
        baseUrl: `http://127.0.0.1:${env.PORT ?? "3000"}`,
        output: () => output,
        exited
      }
      return { service, guard }
    }),
    ({ service, guard }) =>
      Effect.gen(function* () {
        if (service.child.exitCode === null && service.child.signalCode === null) {
          service.child.kill("SIGTERM")
          const stopped = yield* service.exited.pipe(Effect.timeoutOption("20 seconds"))
          if (Option.isNone(stopped)) {
            service.child.kill("SIGKILL")
            yield* service.exited
          }
        }
        yield* guard.dismiss
      })
  ).pipe(Effect.map(({ service }) => service))

/**
 * Runs a command to its end and answers its exit code and its output (stdout and stderr, as they
 * came); interrupted, it is killed.
 */
export const runToExit = (command: string, args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv) =>
  Effect.async<{ readonly code: number | null; readonly output: string }>((resume) => {
    let output = ""
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"], ...(env === undefined ? {} : { env }) })
    child.stdout?.on("data", (chunk: Buffer) => {
      output += chunk.toString()
    })
    child.stderr?.on("data", (chunk: Buffer) => {
      output += chunk.toString()
    })
    child.once("exit", (code) => resume(Effect.succeed({ code, output })))
    return Effect.sync(() => child.kill("SIGKILL"))
  })

/**
 * The environment of a service on an external devnet and database (a replica): its own port and
 * data folder, the devnet's contracts, the relayer (dev account 9 unless `extra` names another key:
 * replicas need one each, as in production) and `extra` on top.
 */
export const devnetServiceEnv = <const X extends Record<string, string> = {}>(
  devnet: Devnet,
  databaseUrl: string,
  extra: X = {} as X,
  rpcUrl = devnet.rpcUrl
) =>
  Effect.gen(function* () {
    const port = String(yield* freePort)
    return {
      PORT: port,
      API_URL: `http://127.0.0.1:${port}`,
      DATA_DIR: yield* temporaryDirectory("card-service-replica-"),
      DATABASE_URL: databaseUrl,
      CHAIN_RPC_URL: rpcUrl,
      CHAIN_ID: String(devnet.chainId),
      USD1_ADDRESS: devnet.usd1,
      EXCHANGE_ADDRESS: devnet.exchange,
      STOCK_TOKENS: JSON.stringify(devnet.stocks.map(({ address, feed, symbol }) => ({ symbol, address, feed }))),
      RELAYER_PRIVATE_KEY: ANVIL_ACCOUNT_KEYS[9]!,
      LOG_LEVEL: "Warn",
      ...extra
    }
  })

export interface Answer {
  /** Undefined: no answer (the connection failed, or nothing came within the limit). */
  readonly status: number | undefined
  // biome-ignore lint/suspicious/noExplicitAny: bodies are checked field by field
  readonly body: any
  readonly headers: Headers | undefined
  readonly ms: number
}

/** One JSON request to a spawned service, redirects not followed; never fails. */
export const callService = (
  service: ServiceProcess,
  method: string,
  path: string,
  options: {
    readonly json?: unknown
    readonly token?: string
    readonly headers?: Record<string, string>
    readonly limitMs?: number
  } = {}
) =>
  Effect.promise(async (): Promise<Answer> => {
    const started = Date.now()
    try {
      const response = await fetch(`${service.baseUrl}${path}`, {
        method,
        redirect: "manual",
        headers: {
          "content-type": "application/json",
          ...(options.token === undefined ? {} : { authorization: `Bearer ${options.token}` }),
          ...options.headers
        },
        ...(options.json === undefined ? {} : { body: JSON.stringify(options.json) }),
        signal: AbortSignal.timeout(options.limitMs ?? 30_000)
      })
      const text = await response.text()
      let body: unknown = text === "" ? undefined : text
      try {
        body = JSON.parse(text)
      } catch {}
      return { status: response.status, body, headers: response.headers, ms: Date.now() - started }
    } catch {
      return { status: undefined, body: undefined, headers: undefined, ms: Date.now() - started }
    }
  })

/**
 * A new user signed in on a spawned service, whose identity check was started and approved on the
 * sandbox provider's page (the form submitted as a browser does): answers its key and token.
 */
export const sandboxCardHolder = (service: ServiceProcess, fullName = "Replica Holder") =>
  Effect.gen(function* () {
    const account = privateKeyToAccount(generatePrivateKey())
    const { message } = (yield* callService(service, "POST", "/auth/challenge", { json: { address: account.address } }))
      .body
    const signature = yield* Effect.promise(() => account.signMessage({ message }))
    const { token } = (yield* callService(service, "POST", "/auth/verify", { json: { message, signature } })).body
    const { url } = (yield* callService(service, "POST", "/kyc/session", { token })).body
    const form = new URLSearchParams({ fullName, documentNumber: randomBytes(5).toString("hex"), outcome: "approve" })
    yield* Effect.promise(() => fetch(url, { method: "POST", body: form, redirect: "manual" }))
    return { account, token: token as string }
  })

/** Starts the service (see `spawnService`) and waits until `/health` answers. */
export const startService = (env: Record<string, string>, cwd?: string, args?: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const service = yield* spawnService(env, cwd, args)
    const healthy = eventuallySucceeds(
      `${service.baseUrl}/health to answer 200`,
      Effect.tryPromise(() =>
        fetch(`${service.baseUrl}/health`, { signal: AbortSignal.timeout(2_000) }).then((r) =>
          r.ok ? r : Promise.reject(r.status)
        )
      ),
      { explain: service.output }
    )
    yield* Effect.raceFirst(healthy, Effect.zipRight(service.exited, Effect.fail("exited"))).pipe(
      Effect.orDieWith(() => new Error(`the service exited before it answered /health:\n${service.output()}`))
    )
    return service
  })

/** Sends a signal and waits for the exit code (null when killed by the signal). */
export const stopService = (service: ServiceProcess, signal: NodeJS.Signals) =>
  Effect.suspend(() => {
    if (service.child.exitCode === null && service.child.signalCode === null) service.child.kill(signal)
    return service.exited
  })

/** The output's JSON log lines. */
export const logLines = (output: string): ReadonlyArray<Record<string, unknown>> =>
  output
    .split("\n")
    .filter((line) => line.startsWith("{"))
    .map((line) => JSON.parse(line) as Record<string, unknown>)

export interface ProcessInfo {
  readonly pid: number
  readonly parent: number
  readonly commandLine: string
}

/** Every process of this machine (Linux /proc), other than this one. */
export const processes = (): ReadonlyArray<ProcessInfo> =>
  readdirSync("/proc")
    .filter((name) => /^\d+$/.test(name) && Number(name) !== process.pid)
    .flatMap((name) => {
      try {
        const stat = readFileSync(`/proc/${name}/stat`, "utf8")
        const commandLine = readFileSync(`/proc/${name}/cmdline`, "utf8").replaceAll("\0", " ").trim()
        const parent = Number(stat.slice(stat.lastIndexOf(") ") + 2).split(" ")[1])
        return [{ pid: Number(name), parent, commandLine }]
      } catch {
        return [] // ended while we looked
      }
    })

/** Processes whose command line mentions `text` (a data folder: its anvil, postgres and their watchdogs). */
export const processesMentioning = (text: string) => processes().filter((p) => p.commandLine.includes(text))

/** Waits until no process mentions `text`; answers those still running after `within`. */
export const awaitNoProcessMentioning = (text: string, within: Duration.DurationInput = "30 seconds") =>
  Effect.suspend(() => {
    const left = processesMentioning(text)
    return left.length === 0 ? Effect.succeed(left) : Effect.fail(left)
  }).pipe(Effect.retry(Schedule.spaced("100 millis").pipe(Schedule.upTo(within))), Effect.merge)

/** Safety net for tests that leave servers running on purpose: SIGKILLs whatever still mentions `text`. */
export const killProcessesMentioning = (text: string) =>
  Effect.sync(() => {
    for (const { pid } of processesMentioning(text)) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {}
    }
  })
