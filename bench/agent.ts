/**
 * (f) the agent loop at programme scale: one tick over 10,000 and 100,000 due cards with 1, 2 and 4
 * replicas on one database, in dry mode, plus a live tick of 1,000 refills on the devnet.
 *
 * Each replica is its own process (`bench/agentReplica.ts`, the loop as a service replica builds
 * it), started before the measure and told to tick by a line on stdin, all at once. Per tick the
 * table shows the tick time (start to the last replica done), wall and CPU (all replicas) per card,
 * SQL statements per 100 cards (counted through each replica's SQL client), JSON-RPC calls per 100
 * cards (a counting proxy in front of anvil), rows written (decisions, events and the strategies' and
 * slices' rows: a steady tick writes no card's row, only a row per slice of cards), the largest peak RSS and heap of a replica in the tick and its
 * heap once collected after it, the CPU the bench's own PostgreSQL and anvil spent in the tick (from /proc: where the two cores went) and
 * the load average as the tick ended.
 *
 * Two chains: `memory` (the in-memory chain inside each replica: the CPU-only figures, no node to
 * wait for) and `devnet` (the shared anvil, every balance read a real `eth_call`). Cards are seeded
 * by SQL (`generate_series`), agent wallets for the live run by `anvil_setBalance` (gas) and
 * `anvil_setStorageAt` (USD1 balance slots): seeding 100,000 cards takes seconds. The dry runs'
 * cards come with made-up wallet addresses (as after the loop's first look, which derives and keeps
 * each wallet's address: about 1 ms of CPU per card, once per card and deployment). Everything seeded
 * is removed afterwards. Sizes: BENCH_AGENT_CARDS (default 10000,100000; quick 1000),
 * BENCH_AGENT_REPLICAS (1,2,4), BENCH_AGENT_CHAINS (memory,devnet), BENCH_AGENT_DEVNET_MAX (the
 * largest size also run on the devnet, 10000), BENCH_AGENT_LIVE (refills of the live run, 1000; 0
 * skips it). Memory: BENCH_AGENT_LIVE_HEAP=1 collects the heap before each sample (the peak heap is
 * then the live set), BENCH_AGENT_NODE_OPTIONS are the replicas' Node options (a heap cap, say).
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readdirSync, readFileSync } from "node:fs"
import { loadavg } from "node:os"
import path from "node:path"
import { createInterface } from "node:readline"
import { SqlClient } from "@effect/sql"
import { Cause, ConfigProvider, Effect, Fiber, Layer, Redacted } from "effect"
import { sqlLayer } from "../src/storage/Database.js"
import { clearAgentBench, fundAgentWallets, seedAgentCards } from "../test/support/agentCards.js"
import { median, repoRoot, type Section, serviceEnv } from "./harness.js"
import { startRpcProxy, total } from "./proxies.js"

const SEED = "agent-bench-seed-0123456789abcdef0123456789abcdef"
const INTERVAL_MS = 3_600_000

const listOf = (name: string, fallback: ReadonlyArray<number>) =>
  process.env[name] === undefined
    ? fallback
    : process.env[name]!.split(",")
        .map((n) => Number(n.trim()))
        .filter((n) => n > 0)

interface TickResult {
  readonly claimed: number
  readonly stored: number
  readonly executed: number
  readonly wallMs: number
  readonly cpuMs: number
  readonly statements: number
  readonly peakRssMb: number
  readonly peakHeapMb: number
  readonly heapAfterMb: number
}

interface Replica {
  readonly tick: (at?: number) => Effect.Effect<TickResult>
}

/** A replica process, ready to tick; killed when the scope closes. */
const startReplica = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const child = yield* Effect.acquireRelease(
      Effect.sync(() => {
        const child = spawn(
          process.execPath,
          ["--expose-gc", "--import", "tsx", path.join(repoRoot, "bench", "agentReplica.ts")],
          {
            cwd: repoRoot,
            env: {
              PATH: process.env.PATH ?? "",
              BENCH_AGENT_LIVE_HEAP: process.env.BENCH_AGENT_LIVE_HEAP ?? "",
              // e.g. --max-old-space-size=128: a replica's heap capped, to show what a tick needs.
              NODE_OPTIONS: process.env.BENCH_AGENT_NODE_OPTIONS ?? "",
              HOME: process.env.HOME ?? "",
              LOG_LEVEL: "Warn",
              ...env
            },
            stdio: ["pipe", "pipe", "inherit"]
          }
        ) as ChildProcess
        // A replica that died has closed its stdin: a write's EPIPE is not the news, its exit is
        // (`answer` reports it, and its configuration becomes a failed row).
        child.stdin!.on("error", () => {})
        return child
      }),
      // Asked to exit, so that its statements have ended before the next configuration clears the
      // tables (a replica killed mid-statement leaves its backend running into the clearing);
      // killed if it does not exit within a minute.
      (child) =>
        Effect.async<void>((resume) => {
          if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
          const killer = setTimeout(() => child.kill("SIGKILL"), 60_000)
          child.once("exit", () => {
            clearTimeout(killer)
            resume(Effect.void)
          })
          child.stdin!.end("exit\n")
        })
    )
    // The replica's answers are JSON lines; its log lines (logfmt) are passed over.
    const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
    const answer = (): Effect.Effect<unknown> =>
      Effect.promise(() => lines.next()).pipe(
        Effect.flatMap((next) =>
          next.done
            ? Effect.die(new Error(`an agent replica exited (${child.exitCode})`))
            : next.value.startsWith("{")
              ? Effect.succeed(JSON.parse(next.value))
              : answer()
        )
      )
    yield* answer()
    return {
      tick: (at?: number) =>
        Effect.suspend(() => {
          child.stdin!.write(at === undefined ? "tick\n" : `tick ${at}\n`)
          return answer().pipe(
            Effect.flatMap((result) =>
              typeof result === "object" && result !== null && "error" in result
                ? Effect.die(new Error(`an agent replica's tick failed: ${String(result.error)}`))
                : Effect.succeed(result as TickResult)
            )
          )
        })
    } satisfies Replica
  })

/** Clock ticks per second of /proc/<pid>/stat's CPU times (USER_HZ: 100 on Linux). */
const USER_HZ = 100

/**
 * CPU time so far (ms) of this bench's PostgreSQL and anvil processes (its descendants, by name):
 * with the replicas' own figure, where a tick's CPU goes.
 */
const serviceCpuMs = () => {
  const stats = readdirSync("/proc").flatMap((entry) => {
    if (!/^\d+$/.test(entry)) return []
    try {
      const text = readFileSync(`/proc/${entry}/stat`, "utf8")
      // "pid (comm) state ppid ...": comm may hold spaces, so split after its closing parenthesis.
      const close = text.lastIndexOf(")")
      const fields = text.slice(close + 2).split(" ")
      return [
        {
          pid: Number(entry),
          name: text.slice(text.indexOf("(") + 1, close),
          ppid: Number(fields[1]),
          // utime + stime, plus cutime + cstime: the reaped children's (the postmaster's backends
          // that closed during the tick), so that they still count.
          cpuMs: ((Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * 1000) / USER_HZ
        }
      ]
    } catch {
      return [] // gone meanwhile
    }
  })
  const children = new Map<number, Array<(typeof stats)[number]>>()
  for (const stat of stats) children.set(stat.ppid, [...(children.get(stat.ppid) ?? []), stat])
  const totals = { postgres: 0, anvil: 0 }
  const walk = (pid: number): void => {
    for (const child of children.get(pid) ?? []) {
      if (child.name === "postgres") totals.postgres += child.cpuMs
      if (child.name === "anvil") totals.anvil += child.cpuMs
      walk(child.pid)
    }
  }
  walk(process.pid)
  return totals
}

interface Measure {
  readonly tickMs: number
  readonly wallPerCardMs: number
  readonly cpuPerCardMs: number
  readonly statementsPer100: number
  readonly rpcPer100: number
  readonly rowsWritten: number
  readonly peakRssMb: number
  /** The largest replica's peak V8 heap in the tick, and its heap once collected after it. */
  readonly peakHeapMb: number
  readonly heapAfterMb: number
  readonly claimed: number
  readonly executed: number
  /** Each replica's CPU in the tick, ms. */
  readonly cpuMs: ReadonlyArray<number>
  /** PostgreSQL's and anvil's CPU in the tick, ms. */
  readonly postgresCpuMs: number
  readonly anvilCpuMs: number
  /** This process's CPU in the tick: the JSON-RPC proxy and the sampling of PostgreSQL's backends. */
  readonly benchCpuMs: number
  /** The machine's 1-minute load average as the tick ended. */
  readonly load: number
  /** What the replicas' PostgreSQL backends were doing during the tick (sampled). */
  readonly backends: string
}

/**
 * Decisions and events so far, and the transaction id before which every row counted later was
 * written (the bench's own database is young: no wraparound of the 32-bit `xmin`).
 */
const rowCounts = (sql: SqlClient.SqlClient) =>
  sql<{ decisions: number; events: number; xid: string }>`
    SELECT (SELECT count(*)::int FROM agent_decisions) AS decisions, (SELECT count(*)::int FROM events) AS events,
           (txid_current() % 4294967296)::text AS xid`.pipe(Effect.map((rows) => rows[0]!))

/** The strategies' and slices' rows written since transaction `xid` (a row written twice counts once). */
const scheduleRowsSince = (sql: SqlClient.SqlClient, xid: string) =>
  sql<{ n: number }>`
    SELECT (SELECT count(*) FROM agent_strategies WHERE xmin::text::bigint > ${xid}::bigint)::int
         + (SELECT count(*) FROM agent_slices WHERE xmin::text::bigint > ${xid}::bigint)::int AS n`.pipe(
    Effect.map((rows) => rows[0]!.n)
  )

/** Average number of the database's active backends per state, over samples taken every 50 ms. */
class BackendStates {
  private samples = 0
  private readonly counts = new Map<string, number>()
  add(rows: ReadonlyArray<{ readonly state: string; readonly n: number }>) {
    this.samples++
    for (const { n, state } of rows) this.counts.set(state, (this.counts.get(state) ?? 0) + n)
  }
  /** e.g. "CPU 1.2, IO:WALSync 0.4": a state's backends on average ("CPU": running or waiting for a core). */
  summary() {
    return [...this.counts]
      .sort(([, a], [, b]) => b - a)
      .slice(0, 4)
      .map(([state, n]) => `${state} ${(n / Math.max(1, this.samples)).toFixed(2)}`)
      .join(", ")
  }
}
/**
 * Samples what the replicas' backends wait for until interrupted: where a tick's time goes inside
 * PostgreSQL (locks, WAL flushes, or running).
 */
const sampleBackends = (sql: SqlClient.SqlClient, into: BackendStates) =>
  sql<{ state: string; n: number }>`
    SELECT COALESCE(wait_event_type || ':' || wait_event, 'CPU') AS state, count(*)::int AS n
    FROM pg_stat_activity
    WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
    GROUP BY 1`.pipe(
    Effect.map((rows) => into.add(rows)),
    Effect.orDie,
    Effect.zipRight(Effect.sleep("50 millis")),
    Effect.forever
  )

/**
 * The agent's tables vacuumed and analysed, as autovacuum leaves them between intervals: each
 * configuration starts from the same state, not from the dead rows of the one before (its cards
 * deleted and seeded again under the same ids, and every card's row written by the first tick),
 * which a tick reading cards by an index range otherwise visits too (seen: a configuration run
 * second spent 1.1-1.2 s more of PostgreSQL's CPU in its steady tick, with reads from disk).
 */
const settle = (sql: SqlClient.SqlClient) =>
  sql`VACUUM (ANALYZE) agent_strategies, agent_slices, agent_pages, agent_decisions, events, cards, users`

/** One tick of every replica at once. */
const tickAll = (
  sql: SqlClient.SqlClient,
  replicas: ReadonlyArray<Replica>,
  cards: number,
  rpcCalls: () => number,
  at?: number
) =>
  Effect.gen(function* () {
    const rowsBefore = yield* rowCounts(sql)
    const rpcBefore = rpcCalls()
    const servicesBefore = serviceCpuMs()
    const benchBefore = process.cpuUsage()
    const started = performance.now()
    const backends = new BackendStates()
    const sampling = yield* Effect.fork(sampleBackends(sql, backends))
    const results = yield* Effect.all(
      replicas.map((replica) => replica.tick(at)),
      { concurrency: "unbounded" }
    )
    const tickMs = performance.now() - started
    yield* Fiber.interrupt(sampling)
    const benchCpu = process.cpuUsage(benchBefore)
    const servicesAfter = serviceCpuMs()
    const rowsAfter = yield* rowCounts(sql)
    const claimed = results.reduce((sum, r) => sum + r.claimed, 0)
    return {
      tickMs,
      wallPerCardMs: tickMs / cards,
      cpuPerCardMs: results.reduce((sum, r) => sum + r.cpuMs, 0) / cards,
      statementsPer100: (results.reduce((sum, r) => sum + r.statements, 0) * 100) / cards,
      rpcPer100: ((rpcCalls() - rpcBefore) * 100) / cards,
      // Decisions and events inserted, the strategies' and slices' rows written; the pages of cards
      // due at once (a row inserted and deleted per 1,000 such cards) left out.
      rowsWritten:
        rowsAfter.decisions -
        rowsBefore.decisions +
        (rowsAfter.events - rowsBefore.events) +
        (yield* scheduleRowsSince(sql, rowsBefore.xid)),
      peakRssMb: Math.max(...results.map((r) => r.peakRssMb)),
      peakHeapMb: Math.max(...results.map((r) => r.peakHeapMb)),
      heapAfterMb: Math.max(...results.map((r) => r.heapAfterMb)),
      claimed,
      executed: results.reduce((sum, r) => sum + r.executed, 0),
      cpuMs: results.map((r) => r.cpuMs),
      postgresCpuMs: servicesAfter.postgres - servicesBefore.postgres,
      anvilCpuMs: servicesAfter.anvil - servicesBefore.anvil,
      benchCpuMs: (benchCpu.user + benchCpu.system) / 1000,
      load: loadavg()[0]!,
      backends: backends.summary()
    } satisfies Measure
  })

const fixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : "–")

const row = (label: string, cards: number, replicas: number, m: Measure, refillsPerSecond = Number.NaN) =>
  `| ${label} | ${cards.toLocaleString("en-US")} | ${replicas} | ${fixed(m.tickMs / 1000, 2)} | ${fixed(m.wallPerCardMs, 3)} | ` +
  `${fixed(m.cpuPerCardMs, 3)} | ${m.cpuMs.map((ms) => fixed(ms / 1000, 1)).join(" / ")} | ` +
  `${fixed(m.postgresCpuMs / 1000, 1)} | ${fixed(m.anvilCpuMs / 1000, 1)} | ${fixed(m.benchCpuMs / 1000, 1)} | ` +
  `${fixed(m.statementsPer100, 2)} | ${fixed(m.rpcPer100, 1)} | ${m.rowsWritten.toLocaleString("en-US")} | ` +
  `${fixed(m.peakRssMb, 0)} | ${fixed(m.peakHeapMb, 0)} | ${fixed(m.heapAfterMb, 0)} | ${fixed(refillsPerSecond, 1)} | ${fixed(m.load, 1)} |`

export const agentSection: Section = {
  name: "agent",
  about: "agent ticks over 10,000 and 100,000 cards, 1/2/4 replicas, dry (in-memory chain, devnet) and live",
  run: (ctx) =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const devnet = yield* ctx.sharedDevnet
      // Calls counted by method only: labelling each multicall's 500 reads cost the bench ~0.9 s of CPU
      // per page of 1,000 cards, which the earlier devnet rows counted as the loop's wait.
      const proxy = yield* startRpcProxy(devnet.rpcUrl, { labels: "methods" })
      const sizes = listOf("BENCH_AGENT_CARDS", ctx.sizes.agentCards)
      const replicaCounts = listOf("BENCH_AGENT_REPLICAS", [1, 2, 4])
      const devnetMax = Number(process.env.BENCH_AGENT_DEVNET_MAX ?? 10_000)
      const liveRefills = Number(process.env.BENCH_AGENT_LIVE ?? (ctx.sizes.agentCards[0]! < 10_000 ? 100 : 1_000))
      const baseEnv = (chain: "memory" | "devnet", name: string) => {
        const env = serviceEnv(ctx, devnet, name, {
          LOG_LEVEL: "Warn",
          AGENT_WALLET_SEED: SEED,
          // The bench ticks by hand, each tick at the instant of an interval of its own.
          AGENT_INTERVAL: `${INTERVAL_MS} millis`,
          AGENT_LEASE: "10 minutes",
          // A multicall of 500 reads can take seconds on the loaded shared devnet.
          CHAIN_TIMEOUT: "60 seconds",
          // Four replicas opening their pools at once on a loaded 2-core machine wait longer than the
          // default 3 s for PostgreSQL to start their backends.
          DATABASE_CONNECT_TIMEOUT: "30 seconds"
        })
        return {
          ...env,
          CHAIN_RPC_URL: proxy.url,
          ...(chain === "memory" ? { AGENT_BENCH_CHAIN: "memory" } : {})
        } as Record<string, string>
      }
      const rpcCalls = () => total(proxy.counter.snapshot())
      const lines: Array<string> = [
        `agent ticks (load average at the start: ${loadavg()
          .map((l) => l.toFixed(2))
          .join(" ")}); first: every card's first decision stored; steady: the median of two later ticks, ` +
          "nothing changed, nothing new stored (ticks at the next intervals' instants); live: one tick of cash refills on the devnet",
        "",
        "| tick | cards | replicas | tick, s | wall per card, ms | CPU per card, ms | CPU per replica, s | PostgreSQL CPU, s | anvil CPU, s | bench CPU, s | SQL per 100 cards | JSON-RPC per 100 cards | rows written | peak RSS per replica, MB | peak heap, MB | heap after, MB | refills/s | load average |",
        "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
      ]

      // Each row goes to the progress log at once, and a configuration that fails (a replica's
      // tick dying on a loaded machine) is a row saying so: the others still run.
      const add = (line: string) => {
        lines.push(line)
        ctx.progress(line)
      }
      const orFailedRow = (label: string) => (run: Effect.Effect<void, unknown>) =>
        run.pipe(
          Effect.catchAllCause((cause) =>
            Effect.sync(() => add(`| ${label} | failed: ${Cause.pretty(cause).replace(/\s+/g, " ").slice(0, 400)} |`))
          )
        )

      const chains = (process.env.BENCH_AGENT_CHAINS ?? "memory,devnet").split(",")
      for (const chain of (["memory", "devnet"] as const).filter((c) => chains.includes(c))) {
        for (const cards of sizes) {
          if (chain === "devnet" && cards > devnetMax) continue
          for (const count of replicaCounts) {
            yield* Effect.gen(function* () {
              yield* clearAgentBench(sql)
              const seedStarted = performance.now()
              yield* seedAgentCards(sql, cards, new Date(), { weeklySpendUsd: 140, wallets: "placeholder" })
              const seedMs = performance.now() - seedStarted
              yield* settle(sql)
              const { first, steady } = yield* Effect.scoped(
                Effect.gen(function* () {
                  const replicas = yield* Effect.all(
                    Array.from({ length: count }, (_, i) => startReplica(baseEnv(chain, `agent-${chain}-${i}`))),
                    { concurrency: "unbounded" }
                  )
                  const first = yield* tickAll(sql, replicas, cards, rpcCalls)
                  yield* settle(sql)
                  const steady: Array<Measure> = []
                  // The intervals after the next (every slice's window closed after the strategies
                  // were set), with nothing changed.
                  for (const k of [2, 3]) {
                    steady.push(yield* tickAll(sql, replicas, cards, rpcCalls, Date.now() + k * INTERVAL_MS))
                  }
                  return { first, steady }
                })
              )
              // The steady figures: the faster of the two ticks' row, with the median tick time.
              const [fast] = [...steady].sort((a, b) => a.tickMs - b.tickMs)
              const tickMs = median(steady.map((m) => m.tickMs))
              const steadyMedian: Measure = { ...fast!, tickMs, wallPerCardMs: tickMs / cards }
              ctx.progress(
                `[agent] ${chain} ${cards} cards × ${count} replicas: seeded in ${(seedMs / 1000).toFixed(1)} s, ` +
                  `first ${(first.tickMs / 1000).toFixed(1)} s, steady ${(tickMs / 1000).toFixed(1)} s; ` +
                  `PostgreSQL backends on average, first: ${first.backends}; steady: ${fast!.backends}`
              )
              add(row(`${chain} first`, cards, count, first))
              add(row(`${chain} steady`, cards, count, steadyMedian))
            }).pipe(orFailedRow(`${chain} ${cards} × ${count}`))
          }
        }
      }

      if (liveRefills > 0) {
        for (const count of replicaCounts) {
          yield* Effect.gen(function* () {
            yield* clearAgentBench(sql)
            // Cards below the $10 floor with no spending, wallets holding $25 of USD1: a cash refill each.
            yield* seedAgentCards(sql, liveRefills, new Date(), { weeklySpendUsd: 0 })
            const fundStarted = performance.now()
            yield* fundAgentWallets(sql, devnet, SEED, liveRefills)
            const fundMs = performance.now() - fundStarted
            const live = yield* Effect.scoped(
              Effect.gen(function* () {
                const replicas = yield* Effect.all(
                  Array.from({ length: count }, (_, i) =>
                    startReplica({
                      ...baseEnv("devnet", `agent-live-${i}`),
                      AGENT_MODE: "live",
                      AGENT_CONCURRENCY: "32"
                    })
                  ),
                  { concurrency: "unbounded" }
                )
                return yield* tickAll(sql, replicas, liveRefills, rpcCalls)
              })
            )
            const [executed] = yield* sql<{ n: number }>`
            SELECT count(*)::int AS n FROM agent_decisions WHERE status = 'executed'`
            ctx.progress(
              `[agent] live ${liveRefills} refills × ${count} replicas: wallets funded in ${(fundMs / 1000).toFixed(1)} s, ` +
                `${executed!.n} executed in ${(live.tickMs / 1000).toFixed(1)} s`
            )
            add(row(`live (${executed!.n} executed)`, liveRefills, count, live, executed!.n / (live.tickMs / 1000)))
          }).pipe(orFailedRow(`live ${liveRefills} × ${count}`))
        }
      }
      yield* clearAgentBench(sql)
      return { ratios: [], counts: [], checks: [lines.join("\n")] }
    }).pipe(
      Effect.provide(
        Layer.unwrapEffect(Effect.sync(() => sqlLayer(Redacted.make(ctx.databaseUrl)))).pipe(
          Layer.provide(
            Layer.setConfigProvider(
              ConfigProvider.fromMap(
                new Map([
                  ["DATA_DIR", ctx.tmp],
                  // Seeding and clearing 100,000 cards are single statements of many seconds.
                  ["DATABASE_STATEMENT_TIMEOUT", "10 minutes"]
                ])
              )
            )
          )
        )
      ),
      Effect.mapError((cause) => new Error(String(cause)))
    )
}
