/**
 * What every benchmark section shares: child processes (the service started as `npm start` does,
 * the peer servers as plain JavaScript), CPU and memory readings from /proc, a concurrent task
 * runner, the run sizes and the result rows.
 */
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { closeSync, mkdirSync, openSync, readdirSync, readFileSync } from "node:fs"
import { cpus, loadavg } from "node:os"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { Effect, type Scope } from "effect"
import esbuild from "esbuild"
import pg from "pg"
import { DEVNET_POLL_INTERVAL } from "../src/chain/Deployment.js"
import { ANVIL_ACCOUNT_KEYS, type Devnet } from "../src/chain/Devnet.js"
import { freePort } from "../src/embedded/EmbeddedPostgres.js"

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..")

/** The merchant address both x402 servers are paid to. */
export const MERCHANT = "0x000000000000000000000000000000000000dEaD"
/** The amount of every benchmark payment: the order amount on the service, the route price on the reference. */
export const ORDER_AMOUNT_USD = "1"
export const ORDER_AMOUNT_ATOMIC = 10n ** 18n
/** What an order of the service asks for above its amount stays below: one micro-dollar (its own value, docs/security.md). */
const ORDER_OWN_VALUE_LIMIT = 10n ** 12n
/** The most one benchmark payment transfers. */
export const PAYMENT_CAP_ATOMIC = ORDER_AMOUNT_ATOMIC + ORDER_OWN_VALUE_LIMIT - 1n

/** Whether `received` is what `settled` payments transfer: each the amount, and less than a micro-dollar more. */
export const receivedMatches = (received: bigint, settled: number) => {
  const beyond = received - BigInt(settled) * ORDER_AMOUNT_ATOMIC
  return beyond >= 0n && beyond <= BigInt(settled) * (ORDER_OWN_VALUE_LIMIT - 1n)
}
/** The relayer (settlement sender) of both x402 servers: the devnet's default relayer, account 9. */
export const RELAYER_KEY = ANVIL_ACCOUNT_KEYS[9]!

// ---------------------------------------------------------------------------------------------------
// Sizes and results

export interface Sizes {
  readonly rounds: number
  readonly payments: { readonly 10: number; readonly 1: number }
  /** Payments before each measured pay run (every run starts a fresh server process). */
  readonly warmPayments: number
  /** Payments of the run started right after boot, with no warm-up (concurrency 10). */
  readonly bootPayments: number
  readonly loadSeconds: number
  /** Load before each measured run; before the first run on a server, `primeSeconds` (JIT warm-up). */
  readonly warmSeconds: number
  readonly primeSeconds: number
  readonly signIns: number
  /** Sign-ins before each measured run; before the first, `primeSignIns`. */
  readonly warmSignIns: number
  readonly primeSignIns: number
  readonly recoverSeconds: number
  readonly idleSettleMs: number
  readonly countedOps: number
  /** The agent tick's card counts. */
  readonly agentCards: ReadonlyArray<number>
  /** Concurrent event streams, events published over them, and their rate. */
  readonly events: { readonly streams: number; readonly count: number; readonly perSecond: number }
  /** The remote-chain section: concurrencies compared with the reference, and payments per run. */
  readonly remoteConcurrencies: ReadonlyArray<number>
  readonly remotePayments: (concurrency: number) => number
}

export const sizesFor = (quick: boolean, rounds: number | undefined): Sizes =>
  quick
    ? {
        rounds: rounds ?? 1,
        payments: { 10: 20, 1: 5 },
        warmPayments: 4,
        bootPayments: 10,
        loadSeconds: 1,
        warmSeconds: 0.3,
        primeSeconds: 0.5,
        signIns: 30,
        warmSignIns: 5,
        primeSignIns: 10,
        recoverSeconds: 0.5,
        idleSettleMs: 500,
        countedOps: 3,
        agentCards: [1_000],
        events: { streams: 100, count: 1_000, perSecond: 500 },
        remoteConcurrencies: [10],
        remotePayments: (concurrency) => concurrency
      }
    : {
        rounds: rounds ?? 3,
        payments: { 10: 150, 1: 60 },
        warmPayments: 20,
        bootPayments: 100,
        loadSeconds: 5,
        warmSeconds: 1,
        primeSeconds: 5,
        signIns: 300,
        warmSignIns: 20,
        primeSignIns: 150,
        recoverSeconds: 3,
        idleSettleMs: 3000,
        countedOps: 10,
        agentCards: [10_000, 100_000],
        events: { streams: 1_000, count: 10_000, perSecond: 1_000 },
        remoteConcurrencies: [10, 50, 200],
        // At least 5 blocks' worth at the rates seen (10-50/s), so that a run is not one block.
        remotePayments: (concurrency) => Math.max(150, 2 * concurrency)
      }

/** One line of the ratio table: the same measure taken on the service and on its reference. */
export interface RatioRow {
  readonly measure: string
  readonly better: "higher" | "lower"
  readonly reference: string
  readonly service: ReadonlyArray<number>
  readonly peer: ReadonlyArray<number>
  /** Failed operations over all runs, service / reference. */
  readonly errors: readonly [number, number]
}

/** One line of the count table: transport-level calls per operation. */
export interface CountRow {
  readonly flow: string
  readonly rpc: number | undefined
  readonly sql: number | undefined
  readonly detail: string
}

export interface SectionResult {
  readonly ratios: ReadonlyArray<RatioRow>
  readonly counts: ReadonlyArray<CountRow>
  /** Checks made on the results, printed under the tables. */
  readonly checks?: ReadonlyArray<string>
}

export interface BenchContext {
  readonly sizes: Sizes
  /** Root of this run's temporary files (removed at the end). */
  readonly tmp: string
  /** The one PostgreSQL every server uses (the `bench` database, migrated by the service). */
  readonly databaseUrl: string
  /** A devnet shared by the sections that do not need a fresh one. */
  readonly sharedDevnet: Effect.Effect<Devnet>
  /** A running service on the shared devnet (read, health and sign-in sections). */
  readonly sharedService: Effect.Effect<ServerProcess>
  /** A running bare `node:http` + `pg` server on the same database. */
  readonly sharedBare: Effect.Effect<ServerProcess>
  /** The stack's floor (peers/effectFloor.ts) on the same database, run with the service's node flags. */
  readonly sharedFloor: Effect.Effect<ServerProcess>
  readonly progress: (line: string) => void
}

export interface Section {
  readonly name: string
  readonly about: string
  readonly run: (ctx: BenchContext) => Effect.Effect<SectionResult, Error, Scope.Scope>
}

// ---------------------------------------------------------------------------------------------------
// Statistics

export const median = (values: ReadonlyArray<number>) => {
  const sorted = [...values].sort((a, b) => a - b)
  const mid = Math.floor(sorted.length / 2)
  return sorted.length === 0
    ? Number.NaN
    : sorted.length % 2 === 1
      ? sorted[mid]!
      : (sorted[mid - 1]! + sorted[mid]!) / 2
}

export const percentile = (values: ReadonlyArray<number>, p: number) => {
  const sorted = [...values].sort((a, b) => a - b)
  return sorted.length === 0 ? Number.NaN : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!
}

/** Runs that alternate which side goes first, so a drift in machine load hits both alike. */
export const alternating = <A>(round: number, service: A, peer: A): ReadonlyArray<A> =>
  round % 2 === 0 ? [service, peer] : [peer, service]

// ---------------------------------------------------------------------------------------------------
// /proc readings

const clockTicks = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100
  } catch {
    return 100
  }
})()

/** User + system CPU time the process has used so far, in ms. */
export const cpuMs = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / clockTicks
}

/** Resident set size in MB. */
export const rssMb = (pid: number) => {
  const match = /^VmRSS:\s+(\d+) kB/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
  return match === null ? Number.NaN : Number(match[1]) / 1024
}

export const machine = () => ({
  cores: Number(execFileSync("nproc", { encoding: "utf8" }).trim()),
  cpu: /^model name\s*:\s*(.+)$/m.exec(readFileSync("/proc/cpuinfo", "utf8"))?.[1]?.trim() ?? cpus()[0]?.model ?? "?",
  node: process.version,
  load: loadavg()
    .map((l) => l.toFixed(2))
    .join(" ")
})

// ---------------------------------------------------------------------------------------------------
// Child processes

export interface ServerProcess {
  readonly name: string
  readonly pid: number
  readonly baseUrl: string
  /** Spawn to the first 200 from /health, in ms. */
  readonly readyMs: number
  readonly cpuMs: () => number
  readonly rssMb: () => number
}

/** Every process started by `pid`, transitively, read from /proc. */
const descendants = (pid: number): Array<number> => {
  const children = new Map<number, Array<number>>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const parent = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1])
      children.set(parent, [...(children.get(parent) ?? []), Number(entry)])
    } catch {} // the process is gone
  }
  const below = (p: number): Array<number> => (children.get(p) ?? []).flatMap((child) => [child, ...below(child)])
  return below(pid)
}

/**
 * The last resort when this process exits without running its finalizers (an uncaught error, a
 * closed stdout): no child outlives it, the embedded servers included. A normal exit finds none.
 */
export const killDescendantsOnExit = () =>
  process.once("exit", () => {
    for (const pid of descendants(process.pid)) {
      try {
        process.kill(pid, "SIGKILL")
      } catch {} // already gone
    }
  })

const exitedEarly = (child: ChildProcess) => child.exitCode !== null || child.signalCode !== null

let spawned = 0

/**
 * Spawns a child whose stdout and stderr go to a file under `<tmp>/logs`: the kernel writes it,
 * so a chatty child costs this process (and the shared CPU) nothing.
 */
const spawnTracked = (
  tmp: string,
  name: string,
  command: string,
  args: ReadonlyArray<string>,
  env: Record<string, string>
) =>
  Effect.acquireRelease(
    Effect.sync(() => {
      mkdirSync(path.join(tmp, "logs"), { recursive: true })
      const logFile = path.join(tmp, "logs", `${name}-${++spawned}.log`)
      const log = openSync(logFile, "w")
      const child = spawn(command, args, { cwd: repoRoot, env, stdio: ["ignore", log, log] })
      closeSync(log)
      return { child, output: () => readFileSync(logFile, "utf8").slice(-20_000) }
    }),
    ({ child }) =>
      Effect.async<void>((resume) => {
        if (exitedEarly(child)) return resume(Effect.void)
        const kill = setTimeout(() => child.kill("SIGKILL"), 10_000)
        child.once("exit", () => {
          clearTimeout(kill)
          resume(Effect.void)
        })
        child.kill("SIGTERM")
      })
  )

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Spawns a server and waits for its /health to answer 200 (polled every 10 ms). */
const spawnServer = (
  tmp: string,
  name: string,
  command: string,
  args: ReadonlyArray<string>,
  env: Record<string, string>
) =>
  Effect.gen(function* () {
    const port = yield* freePort
    const started = performance.now()
    const { child, output } = yield* spawnTracked(tmp, name, command, args, { ...env, PORT: String(port) })
    const baseUrl = `http://127.0.0.1:${port}`
    const readyMs = yield* Effect.tryPromise({
      try: async () => {
        while (performance.now() - started < 120_000) {
          if (exitedEarly(child)) throw new Error("exited")
          const ok = await fetch(`${baseUrl}/health`, { signal: AbortSignal.timeout(2_000) }).then(
            async (response) => {
              await response.arrayBuffer()
              return response.ok
            },
            () => false
          )
          if (ok) return performance.now() - started
          await sleep(10)
        }
        throw new Error("timed out")
      },
      catch: (cause) => new Error(`${name} did not become healthy (${String(cause)}):\n${output().slice(-4000)}`)
    })
    const pid = child.pid!
    return {
      name,
      pid,
      baseUrl,
      readyMs,
      cpuMs: () => cpuMs(pid),
      rssMb: () => rssMb(pid)
    } satisfies ServerProcess
  })

export const basePath = (root = repoRoot) =>
  [path.join(root, "node_modules", ".bin"), path.dirname(process.execPath), process.env.PATH ?? ""].join(":")

/** package.json's `start` command of a checkout (this one by default). */
export const startScript = (root = repoRoot) => {
  const pkg = JSON.parse(readFileSync(path.join(root, "package.json"), "utf8")) as {
    scripts?: Record<string, string>
  }
  const script = pkg.scripts?.start
  if (script === undefined) throw new Error("package.json has no start script")
  return script
}

/**
 * The service, started with package.json's `start` command as npm runs it (node_modules/.bin on
 * PATH), with exactly `env` plus PATH and HOME. `exec` makes the measured pid the server itself.
 */
export const startService = (ctx: Pick<BenchContext, "tmp">, env: Record<string, string>) =>
  Effect.gen(function* () {
    const server = yield* spawnServer(ctx.tmp, "service", "sh", ["-c", `exec ${startScript()}`], {
      PATH: basePath(),
      HOME: process.env.HOME ?? "",
      ...env
    })
    const command = readFileSync(`/proc/${server.pid}/comm`, "utf8").trim()
    if (command !== "node") {
      return yield* Effect.fail(new Error(`the start script runs "${command}", not node: CPU and RSS would be wrong`))
    }
    return server
  })

const transpiled = new Map<string, string>()

/**
 * A peer program from bench/peers/, bundled to JavaScript in memory and run by plain node (no
 * loader at run time), from the repository folder so that its package imports resolve. Packages
 * stay imports; the relative files a peer imports (pure modules of src/ that fix a shape it shares
 * with the service, such as `merchant/OrderJson.ts`) are bundled into it.
 */
const peerCode = (peer: string) => {
  const cached = transpiled.get(peer)
  if (cached !== undefined) return cached
  const { outputFiles } = esbuild.buildSync({
    entryPoints: [path.join(repoRoot, "bench", "peers", `${peer}.ts`)],
    bundle: true,
    packages: "external",
    format: "esm",
    platform: "node",
    target: "es2022",
    write: false
  })
  const code = outputFiles[0]!.text
  transpiled.set(peer, code)
  return code
}

const peerArgs = (peer: string, nodeFlags: ReadonlyArray<string> = []) => [
  ...nodeFlags,
  "--input-type=module",
  "--eval",
  peerCode(peer)
]

/** The node flags of package.json's `start` (`node <flags> scripts/start.mjs`): a peer run as the service runs. */
export const serviceNodeFlags = () => startScript().split(/\s+/).slice(1, -1)

export const startPeer = (
  ctx: Pick<BenchContext, "tmp">,
  peer: string,
  env: Record<string, string>,
  nodeFlags: ReadonlyArray<string> = []
) => spawnServer(ctx.tmp, peer, process.execPath, peerArgs(peer, nodeFlags), { PATH: basePath(), ...env })

/** Runs a peer program to completion and answers its last stdout line, parsed as JSON. */
export const runPeer = <A>(ctx: Pick<BenchContext, "tmp">, peer: string, env: Record<string, string>) =>
  Effect.scoped(
    Effect.gen(function* () {
      const { child, output } = yield* spawnTracked(ctx.tmp, peer, process.execPath, peerArgs(peer), {
        PATH: basePath(),
        ...env
      })
      const code = yield* Effect.async<number | null>((resume) => {
        if (exitedEarly(child)) return resume(Effect.succeed(child.exitCode))
        child.once("exit", (exit) => resume(Effect.succeed(exit)))
      })
      const lines = output().trim().split("\n")
      if (code !== 0) return yield* Effect.fail(new Error(`${peer} exited with ${code}:\n${output().slice(-4000)}`))
      return JSON.parse(lines[lines.length - 1]!) as A
    })
  )

let databases = 0
/**
 * A database of its own for one run: each run has a fresh devnet, and the journal of an earlier
 * run (the same relayer key, transactions of a devnet that is gone) would have the new replicas
 * re-check, re-send and reconcile what the new chain never saw.
 */
export const runDatabase = (ctx: Pick<BenchContext, "databaseUrl">) =>
  Effect.acquireRelease(
    Effect.promise(async () => {
      const name = `run_${process.pid}_${++databases}`
      const admin = new pg.Client({ connectionString: ctx.databaseUrl })
      await admin.connect()
      await admin.query(`CREATE DATABASE ${name}`).finally(() => admin.end())
      const url = new URL(ctx.databaseUrl)
      url.pathname = `/${name}`
      return { name, url: url.href }
    }),
    ({ name }) =>
      Effect.promise(async () => {
        const admin = new pg.Client({ connectionString: ctx.databaseUrl })
        await admin.connect()
        await admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`).finally(() => admin.end())
      }).pipe(Effect.ignore)
  )

/** The service's chain settings for a devnet: everything configured, nothing embedded. */
export const chainEnv = (devnet: Devnet) => ({
  CHAIN_RPC_URL: devnet.rpcUrl,
  CHAIN_ID: String(devnet.chainId),
  USD1_ADDRESS: devnet.usd1,
  RELAYER_PRIVATE_KEY: RELAYER_KEY,
  // A configured chain is polled every second by default; this one is a devnet (anvil mines a
  // transaction within milliseconds), polled like the embedded one.
  CHAIN_POLL_INTERVAL: DEVNET_POLL_INTERVAL,
  EXCHANGE_ADDRESS: devnet.exchange,
  STOCK_TOKENS: JSON.stringify(
    devnet.stocks.map((s) => ({
      symbol: s.symbol,
      name: s.name,
      address: s.address,
      feed: s.feed,
      platform: "devnet"
    }))
  )
})

/** The service's environment on a devnet: everything configured, nothing embedded. */
export const serviceEnv = (
  ctx: Pick<BenchContext, "tmp" | "databaseUrl">,
  devnet: Devnet,
  dataDir: string,
  extra: Record<string, string> = {}
) => {
  const dir = path.join(ctx.tmp, dataDir)
  mkdirSync(dir, { recursive: true })
  return {
    DATA_DIR: dir,
    DATABASE_URL: ctx.databaseUrl,
    ...chainEnv(devnet),
    MERCHANT_PAY_TO: MERCHANT,
    // Load generators are one client address; the limits have their own tests.
    RATE_LIMIT_ORDERS: "1000000000",
    RATE_LIMIT_SIGNIN: "1000000000",
    // Every stream of the events section comes from it too (below the replica's 5,000, as required).
    EVENTS_MAX_STREAMS_PER_CLIENT: "4999",
    // The default (Info, one access-log line per request) unless BENCH_LOG_LEVEL says otherwise.
    ...(process.env.BENCH_LOG_LEVEL === undefined ? {} : { LOG_LEVEL: process.env.BENCH_LOG_LEVEL }),
    SHUTDOWN_GRACE: "2 seconds",
    ...extra
  }
}

// ---------------------------------------------------------------------------------------------------
// Load

export interface Outcome {
  /** Latency of each successful operation, ms. */
  readonly latencies: ReadonlyArray<number>
  readonly failures: number
  /** A few distinct failure messages. */
  readonly failureSamples: ReadonlyArray<string>
  readonly wallMs: number
}

/**
 * How long one operation may take before it counts as failed: a server that stops answering (the
 * reference's facilitator once left a gap in its relayer's nonces, and every later transfer queued
 * behind it on the devnet) fails its run instead of holding the bench forever.
 */
const OPERATION_LIMIT_MS = 60_000

class OperationTimedOut extends Error {}

const withinLimit = (operation: Promise<unknown>) => {
  let timer: NodeJS.Timeout | undefined
  const limit = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new OperationTimedOut(`no answer within ${OPERATION_LIMIT_MS / 1000} s`)),
      OPERATION_LIMIT_MS
    )
  })
  return Promise.race([operation, limit]).finally(() => clearTimeout(timer))
}

/**
 * Runs `total` operations on `concurrency` workers, each taking the next index when it is free; an
 * operation past OPERATION_LIMIT_MS counts as failed (it is left to settle or not in the background)
 * and no further operation starts.
 */
export const runConcurrently = async (
  concurrency: number,
  total: number,
  operation: (worker: number, index: number) => Promise<unknown>
): Promise<Outcome> => {
  const latencies: Array<number> = []
  const samples = new Set<string>()
  let failures = 0
  let next = 0
  const started = performance.now()
  await Promise.all(
    Array.from({ length: concurrency }, async (_, worker) => {
      for (let index = next++; index < total; index = next++) {
        const began = performance.now()
        try {
          await withinLimit(operation(worker, index))
          latencies.push(performance.now() - began)
        } catch (error) {
          failures++
          if (samples.size < 3) samples.add(error instanceof Error ? error.message : String(error))
          // A server that stopped answering would fail every later operation the same way, slowly.
          if (error instanceof OperationTimedOut) next = total
        }
      }
    })
  )
  return { latencies, failures, failureSamples: [...samples], wallMs: performance.now() - started }
}

/** Fails the request unless it answered `status`; answers the parsed JSON body. */
export const expectJson = async <A>(response: Response, status = 200): Promise<A> => {
  const text = await response.text()
  if (response.status !== status) throw new Error(`HTTP ${response.status}: ${text.slice(0, 300)}`)
  return JSON.parse(text) as A
}

export const postJson = (url: string, body: unknown) =>
  fetch(url, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body) })
