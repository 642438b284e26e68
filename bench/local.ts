/**
 * The service of a checkout started as `npm start` runs it (scripts/start.mjs), for the profile and
 * compare tools: on the machine's PostgreSQL (DATABASE_URL, default postgres@127.0.0.1:5432, a
 * throwaway database per start, dropped at the stop) with an embedded devnet and the demo merchant
 * on; and the load of one route (`read`: one order; `me`: a fresh user's bearer; `health`; `signin`:
 * sign-ins with fresh keys; `pay`: x402 payments of orders, on a devnet of its own, `payDevnet`).
 */
import { spawn } from "node:child_process"
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import autocannon from "autocannon"
import { Effect, Exit, Scope } from "effect"
import pg from "pg"
import { startDevnet } from "../src/chain/Devnet.js"
import { freePort } from "../src/embedded/EmbeddedPostgres.js"
import { basePath, chainEnv, cpuMs, MERCHANT, repoRoot, rssMb, startScript } from "./harness.js"
import { createOrder, fundedPayers, payingFetch, servicePayment } from "./pay.js"
import { signIn } from "./signin.js"

const adminUrl = process.env.DATABASE_URL ?? "postgres://postgres@127.0.0.1:5432/postgres"
let started = 0

export const startLocalService = async (
  options: { readonly root?: string; readonly profile?: boolean; readonly env?: Record<string, string> } = {}
) => {
  const dir = mkdtempSync(path.join(tmpdir(), "card-service-local-"))
  const database = `local_${process.pid}_${started++}`
  const admin = new pg.Client({ connectionString: adminUrl })
  await admin.connect()
  await admin.query(`CREATE DATABASE ${database}`)
  const databaseUrl = new URL(adminUrl)
  databaseUrl.pathname = `/${database}`
  const port = await Effect.runPromise(freePort)
  const baseUrl = `http://127.0.0.1:${port}`
  const root = options.root ?? repoRoot
  // As npm runs it (the checkout's own node flags, a profile's added); `exec` makes the child's pid the server's.
  const start = startScript(root)
  if (!start.startsWith("node ")) throw new Error(`the start script of ${root} does not run node: ${start}`)
  const flags = options.profile ? `--cpu-prof --cpu-prof-dir=${dir} ` : ""
  const server = spawn("sh", ["-c", `exec node ${flags}${start.slice("node ".length)}`], {
    cwd: root,
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      PATH: basePath(root),
      HOME: process.env.HOME,
      PORT: String(port),
      DATA_DIR: dir,
      DATABASE_URL: databaseUrl.href,
      MERCHANT_PAY_TO: MERCHANT,
      RATE_LIMIT_ORDERS: "1000000000",
      RATE_LIMIT_SIGNIN: "1000000000",
      SHUTDOWN_GRACE: "2 seconds",
      ...options.env
    }
  })
  const exited = new Promise<void>((resolve) => server.once("exit", () => resolve()))
  for (let ready = false; !ready; ) {
    await new Promise((resolve) => setTimeout(resolve, 50))
    ready = await fetch(`${baseUrl}/health`).then(
      (response) => response.ok,
      () => false
    )
  }
  const pid = server.pid!
  /** CPU time the database's server processes (PostgreSQL backends) serving this service have used so far, in ms. */
  const databaseCpuMs = async () => {
    const { rows } = await admin.query<{ pid: number }>("SELECT pid FROM pg_stat_activity WHERE datname = $1", [
      database
    ])
    // The machine's PostgreSQL (local.ts's default): its backends are processes here. One that ended meanwhile is left out.
    const backendCpuMs = (backend: number) => {
      try {
        return cpuMs(backend)
      } catch {
        return 0
      }
    }
    return rows.reduce((sum, row) => sum + backendCpuMs(row.pid), 0)
  }
  const remove = () => rmSync(dir, { recursive: true, force: true, maxRetries: 5 })
  return {
    baseUrl,
    dir,
    cpuMs: () => cpuMs(pid),
    databaseCpuMs,
    rssMb: () => rssMb(pid),
    /**
     * Stops the service, drops its database and removes its folder (a profiled one's stays until
     * `remove`: the profile is read from it); answers when it exited.
     */
    stop: async () => {
      server.kill("SIGTERM")
      await exited
      const at = performance.now()
      await admin.query(`DROP DATABASE ${database} WITH (FORCE)`)
      await admin.end()
      if (!options.profile) remove()
      return at
    },
    remove
  }
}

/** What a load run counted: operations answered 2xx, in `duration` seconds, and the failed ones. */
export interface LoadResult {
  readonly "2xx": number
  readonly duration: number
  readonly non2xx: number
  readonly errors: number
}

const CONNECTIONS = 10

/** `operation` run by `clients` clients, each after its last, for `seconds`; one answered operation counts as one. */
const clientLoad =
  (operation: (client: number) => Promise<unknown>, clients = CONNECTIONS) =>
  async (seconds: number): Promise<LoadResult> => {
    const end = performance.now() + seconds * 1000
    let done = 0
    let failed = 0
    await Promise.all(
      Array.from({ length: clients }, async (_, client) => {
        while (performance.now() < end) {
          await operation(client).then(
            () => done++,
            () => failed++
          )
        }
      })
    )
    return { "2xx": done, duration: seconds, non2xx: 0, errors: failed }
  }

/**
 * A devnet of its own for the `pay` route: start the service with `env` (configured on it), then
 * `load` pays orders with `clients` (10) funded payers, each a standard x402 client; `close` stops the devnet.
 */
export const payDevnet = async (clients = CONNECTIONS) => {
  const scope = Effect.runSync(Scope.make())
  const devnet = await Effect.runPromise(Scope.extend(startDevnet(), scope))
  const fetches = (await Effect.runPromise(fundedPayers(devnet, clients))).map((payer) => payingFetch(payer, devnet))
  return {
    env: chainEnv(devnet),
    load: (baseUrl: string) => clientLoad((client) => servicePayment(baseUrl)(fetches[client]!), clients),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** A load run of `seconds` on the route: autocannon with 10 connections, or 10 clients signing in (`signin`). */
export const target = async (baseUrl: string, route: string): Promise<(seconds: number) => Promise<LoadResult>> => {
  if (route === "signin") return clientLoad(() => signIn(baseUrl))
  const { path: loaded, headers } = await (async (): Promise<{ path: string; headers: Record<string, string> }> => {
    if (route === "health") return { path: "/health", headers: {} }
    if (route === "read") return { path: `/merchant/orders/${(await createOrder(baseUrl)).id}`, headers: {} }
    const token = await signIn(baseUrl)
    return { path: "/me", headers: { authorization: `Bearer ${token}` } }
  })()
  return (seconds: number) =>
    autocannon({ url: `${baseUrl}${loaded}`, headers, connections: CONNECTIONS, duration: seconds })
}
