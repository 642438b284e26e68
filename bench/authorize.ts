/**
 * (i) card authorizations (issue 37): the card network's signed Auth Stream Access requests on
 * `POST /card-network/messages`, answered by one replica of the service, against the bare
 * `node:http` + `pg` peer (bench/peers/bareAuthorize.ts) that verifies the same signature and
 * decides and stores the same hold in one statement, on the same database and tables.
 *
 * Set-up, once: a database of its own (dropped at the end), the service started as `npm start`
 * runs it on the shared devnet with a known sandbox-network secret (CARD_SANDBOX_SECRET), and CARDS
 * card holders inserted directly (a `users` row and a `cards` row each, EIP-55 addresses as the API
 * stores them, the card's network token in `issuer_ref`). Each card wallet is given USD1 on the
 * devnet by writing USD1's balance slot (anvil_setStorageAt), and the bench waits until the
 * service's own balance follower has read every one into `card_wallet_balances`: the follower runs
 * throughout with its default settings, so the balances stay current as in production.
 *
 * Each run starts from the same state: the authorizations, network events and holders' events of
 * the run before are truncated, OPEN_HOLDS open holds per card are inserted, the tables analysed,
 * then a warm-up (the first on each server: `primeSeconds`) and the measured load:
 * - concurrency 1: one request after another (the cost of an authorization without contention);
 * - concurrency 50: 50 clients, each sending its next request when its answer arrived;
 * - a fixed rate of 200 requests a second (open loop: each sent on time, whatever is in flight).
 * Each server's CPU with no request is sampled once before the runs.
 * Every request is a fresh authorization (a new transaction token and message id) of $1.00-$19.99
 * on a card drawn at random from CARDS, its body built as the sandbox network builds it
 * (LithicWire.asaRequestBody) and signed once with Standard Webhooks' `sign`, as the network signs.
 * Latency is measured here, from the request's send to its answer's last byte. An answer counts
 * when it is a 200 naming the request's token; approved authorizations/s counts APPROVED answers
 * (every card holds far more than a run can hold: any other answer is a stand-in). The stored rows
 * are counted after each run (one per answer; stand-ins by their stored reason).
 *
 * The statements per authorization are counted through a counting PostgreSQL proxy, one request at
 * a time, on a second service instance and a second peer instance (their background loops slowed).
 *
 * BENCH_AUTHORIZE_PROFILE=<folder>: the service runs with V8's CPU profiler on from its start (a
 * preloaded script: Node 20 refuses --cpu-prof in NODE_OPTIONS) and writes `service.cpuprofile`
 * there at its exit, with `windows.json` (each measured run's start and end, µs of the monotonic
 * clock the profile's times use), the service's log and the bundle it ran (`main.cjs`: the profile's
 * line numbers are its).
 */
import { createHash, randomBytes, randomUUID } from "node:crypto"
import { copyFileSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { Agent, request } from "node:http"
import { loadavg } from "node:os"
import path from "node:path"
import { Effect } from "effect"
import pg from "pg"
import { encodeAbiParameters, getAddress, type Hex, keccak256, numberToHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { asaRequestBody } from "../src/authorizations/LithicWire.js"
import { formatSecret, secretKey, sign } from "../src/authorizations/StandardWebhooks.js"
import type { Devnet } from "../src/chain/Devnet.js"
import {
  alternating,
  type BenchContext,
  type CountRow,
  median,
  percentile,
  type RatioRow,
  repoRoot,
  runDatabase,
  type Section,
  type ServerProcess,
  serviceEnv,
  startPeer,
  startService
} from "./harness.js"
import { type Counter, difference, startPgProxy, total } from "./proxies.js"

/** Card holders seeded, each with its own card and card wallet. */
const CARDS = 1_000
/** Open holds per card at the start of each run. */
const OPEN_HOLDS = 5
const CONCURRENCY = 50
const RATE = 200
/** Each card wallet's USD1: far above what a run holds, so that every answer is an approval. */
const WALLET_USD1 = 1_000_000n * 10n ** 18n
/** Targets of issue 37 on this 2-core machine. */
const TARGET_P99_MS = 50
const TARGET_THROUGHPUT_RATIO = 0.35
/** A request whose socket stays silent this long counts as failed (an idle timeout, not a bound on the latency). */
const REQUEST_TIMEOUT_MS = 10_000
/** How long each server's CPU is sampled with no request. */
const IDLE_SAMPLE_MS = 5_000
/** Requests, one at a time, whose statements are counted. */
const COUNTED = 20

const MERCHANT = { name: "Bench Coffee", mcc: "5814", city: "Oakland", country: "USA" } as const

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

const cardToken = (i: number) => `authorize-${i}`
const cardAddress = (i: number) =>
  getAddress(`0x${createHash("sha256").update(`authorize-holder-${i}`).digest("hex").slice(0, 40)}`)

// ---------------------------------------------------------------------------------------------------
// Load

/** One server under load: its URL, a keep-alive agent and the key the network signs with. */
interface Target {
  readonly url: URL
  readonly agent: Agent
  readonly key: Buffer
}

interface Tally {
  readonly latencies: Array<number>
  /** Answers by Lithic result code. */
  readonly results: Map<string, number>
  failures: number
  readonly samples: Set<string>
}

const newTally = (): Tally => ({ latencies: [], results: new Map(), failures: 0, samples: new Set() })

const answered = (tally: Tally) => [...tally.results.values()].reduce((sum, n) => sum + n, 0)

const post = (target: Target, body: string, headers: Record<string, string>) =>
  new Promise<{ readonly status: number; readonly text: string }>((resolve, reject) => {
    const req = request(
      target.url,
      {
        method: "POST",
        agent: target.agent,
        headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body), ...headers }
      },
      (res) => {
        const chunks: Array<Buffer> = []
        res.on("data", (chunk: Buffer) => chunks.push(chunk))
        res.on("end", () => resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }))
        res.on("error", reject)
      }
    )
    req.setTimeout(REQUEST_TIMEOUT_MS, () =>
      req.destroy(new Error(`no byte of answer for ${REQUEST_TIMEOUT_MS / 1000} s`))
    )
    req.on("error", reject)
    req.end(body)
  })

/** A fresh authorization request on a random card, signed as the network signs it. */
const message = (key: Buffer) => {
  const token = randomUUID()
  const messageId = `msg_${randomBytes(16).toString("hex")}`
  const body = JSON.stringify(
    asaRequestBody({
      token,
      card: { token: cardToken(1 + Math.floor(Math.random() * CARDS)), lastFour: "0000" },
      cents: 100 + Math.floor(Math.random() * 1_900),
      merchant: MERCHANT,
      channel: "in_person",
      created: new Date()
    })
  )
  return { token, body, headers: sign(key, messageId, body, Date.now()) }
}

/** Sends one authorization and books its answer in `tally`. */
const authorizeOnce = async (target: Target, tally: Tally) => {
  const { token, body, headers } = message(target.key)
  const began = performance.now()
  try {
    const answer = await post(target, body, headers)
    const ms = performance.now() - began
    if (answer.status !== 200) throw new Error(`HTTP ${answer.status}: ${answer.text.slice(0, 200)}`)
    const json = JSON.parse(answer.text) as { token?: unknown; result?: unknown }
    if (json.token !== token || typeof json.result !== "string") {
      throw new Error(`answer not for the request: ${answer.text.slice(0, 200)}`)
    }
    tally.latencies.push(ms)
    tally.results.set(json.result, (tally.results.get(json.result) ?? 0) + 1)
  } catch (error) {
    tally.failures++
    if (tally.samples.size < 3) tally.samples.add(error instanceof Error ? error.message : String(error))
  }
}

/** `concurrency` clients, each sending its next request when its answer arrived, for `seconds`. */
const closedLoop = async (target: Target, seconds: number, concurrency: number) => {
  const tally = newTally()
  const started = performance.now()
  const until = started + seconds * 1000
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (performance.now() < until) await authorizeOnce(target, tally)
    })
  )
  return { tally, wallMs: performance.now() - started }
}

/** `perSecond` requests a second for `seconds`, each sent on its time whatever is still in flight. */
const fixedRate = async (target: Target, seconds: number, perSecond: number) => {
  const tally = newTally()
  const count = Math.round(seconds * perSecond)
  const started = performance.now()
  let lateMs = 0
  const inFlight: Array<Promise<void>> = []
  for (let i = 0; i < count; i++) {
    const due = started + (i * 1000) / perSecond
    const wait = due - performance.now()
    if (wait >= 1) await sleep(wait)
    lateMs = Math.max(lateMs, performance.now() - due)
    inFlight.push(authorizeOnce(target, tally))
  }
  await Promise.all(inFlight)
  return { tally, wallMs: performance.now() - started, lateMs }
}

// ---------------------------------------------------------------------------------------------------
// CPU readings

/** CPU time so far (ms) of this process's PostgreSQL processes (its descendants named postgres), reaped children included. */
const postgresCpuMs = () => {
  const children = new Map<number, Array<{ pid: number; name: string; cpuMs: number }>>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8")
      const close = stat.lastIndexOf(")")
      const fields = stat.slice(close + 2).split(" ")
      const ppid = Number(fields[1])
      const cpuMs = ((Number(fields[11]) + Number(fields[12]) + Number(fields[13]) + Number(fields[14])) * 1000) / 100
      children.set(ppid, [
        ...(children.get(ppid) ?? []),
        { pid: Number(entry), name: stat.slice(stat.indexOf("(") + 1, close), cpuMs }
      ])
    } catch {} // gone meanwhile
  }
  let sum = 0
  const walk = (pid: number): void => {
    for (const child of children.get(pid) ?? []) {
      if (child.name === "postgres") sum += child.cpuMs
      walk(child.pid)
    }
  }
  walk(process.pid)
  return sum
}

/** User and system CPU time so far (ms) of a process. */
const processTimes = (pid: number) => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return { user: (Number(fields[11]) * 1000) / 100, system: (Number(fields[12]) * 1000) / 100 }
}

interface CpuMark {
  readonly serverSystem: number
  readonly server: number
  readonly postgres: number
  readonly bench: number
}

const cpuMark = (server: ServerProcess): CpuMark => {
  const own = process.cpuUsage()
  return {
    serverSystem: processTimes(server.pid).system,
    server: server.cpuMs(),
    postgres: postgresCpuMs(),
    bench: (own.user + own.system) / 1000
  }
}

// ---------------------------------------------------------------------------------------------------
// The database

/** JSON-RPC calls to the devnet, 200 to a batch request. */
const rpcBatch = async (url: string, calls: ReadonlyArray<{ method: string; params: ReadonlyArray<unknown> }>) => {
  for (let i = 0; i < calls.length; i += 200) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(calls.slice(i, i + 200).map((call, id) => ({ jsonrpc: "2.0", id, ...call })))
    })
    const answers = (await response.json()) as ReadonlyArray<{ error?: unknown }>
    const failed = answers.find((answer) => answer.error !== undefined)
    if (failed !== undefined) throw new Error(`devnet refused ${JSON.stringify(failed.error)}`)
  }
}

/** USD1 (OpenZeppelin's ERC20) keeps its balances in the mapping at slot 0. */
const balanceSlot = (owner: Hex) =>
  keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [owner, 0n]))

/** USD1's `_allowances[owner][spender]` slot (OpenZeppelin's ERC20: the mapping at slot 1). */
const allowanceSlot = (owner: Hex, spender: Hex) =>
  keccak256(
    encodeAbiParameters(
      [{ type: "address" }, { type: "bytes32" }],
      [spender, keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [owner, 1n]))]
    )
  )

/** The card program's settlement account the service runs with: every card's allowance names it. */
const PROGRAM_KEY = generatePrivateKey()
const PROGRAM = privateKeyToAccount(PROGRAM_KEY).address

/**
 * CARDS card holders, inserted directly; their card wallets funded on the devnet; resolved once
 * the service's balance follower has stored every wallet's balance.
 */
const seedCards = async (db: pg.Client, devnet: Devnet) => {
  const addresses = Array.from({ length: CARDS }, (_, i) => cardAddress(i + 1))
  await db.query("INSERT INTO users (address, created_at) SELECT unnest($1::text[]), now()", [addresses])
  await db.query(
    `INSERT INTO cards (id, address, issuer, issuer_ref, holder, number_sealed, cvv_sealed, last4, expiry,
                        document_hash, created_at)
     SELECT 'authorize-' || i, a, 'bench', 'authorize-' || i, 'Bench Holder', '\\x00'::bytea, '\\x00'::bytea,
            '0000', '12/30', decode(md5('authorize-doc-' || i) || md5('authorize-doc2-' || i), 'hex'), now()
     FROM unnest($1::text[]) WITH ORDINALITY AS t(a, i)`,
    [addresses]
  )
  // Each card's spending allowance, as if its holder had signed one: on chain, and as the program recorded it.
  await db.query(
    `INSERT INTO card_allowances (id, card_id, owner, spender, cap, permit_nonce, deadline, requested_at,
                                  submitted_at, tx_hash, tx_raw, seen_at)
     SELECT 'bench-' || c.id, c.id, c.address, $1, $2::numeric, 0, now() + interval '30 days', now(),
            now(), '0x', '0x', now()
     FROM cards c WHERE c.id LIKE 'authorize-%'`,
    [PROGRAM, WALLET_USD1.toString()]
  )
  await rpcBatch(
    devnet.rpcUrl,
    addresses.flatMap((address) => [
      {
        method: "anvil_setStorageAt",
        params: [devnet.usd1, balanceSlot(address), numberToHex(WALLET_USD1, { size: 32 })]
      },
      {
        method: "anvil_setStorageAt",
        params: [devnet.usd1, allowanceSlot(address, PROGRAM), numberToHex(WALLET_USD1, { size: 32 })]
      }
    ])
  )
  const deadline = Date.now() + 120_000
  for (;;) {
    const { rows } = await db.query<{ followed: string; fresh: boolean | null }>(
      `SELECT (SELECT count(*) FROM card_wallet_balances
               WHERE address = ANY($1::text[]) AND usd1 = $2::numeric AND allowance = $2::numeric) AS followed,
              (SELECT checked_at > now() - interval '5 seconds' FROM card_balance_follower) AS fresh`,
      [addresses, WALLET_USD1.toString()]
    )
    if (Number(rows[0]!.followed) === CARDS && rows[0]!.fresh === true) return
    if (Date.now() > deadline) {
      throw new Error(
        `the balance follower stored ${rows[0]!.followed} of ${CARDS} card wallets' balances within 120 s ` +
          `(follower checked recently: ${rows[0]!.fresh})`
      )
    }
    await sleep(250)
  }
}

/** Back to the state every run starts from: no authorization but OPEN_HOLDS open $1 holds per card. */
const resetState = async (db: pg.Client) => {
  await db.query("TRUNCATE card_authorizations, card_network_events, events, event_sequences")
  await db.query(
    `INSERT INTO card_authorizations (id, card_id, address, network, message_id, approved, reason, requested_micros,
       approved_micros, held_micros, available_after_micros, status, merchant_name, merchant_mcc, merchant_city,
       merchant_country, channel, created_at, updated_at, hold_expires_at)
     SELECT 'seed-' || c.id || '-' || k, c.id, c.address, 'sandbox', 'seed-' || c.id || '-' || k, true, NULL, 1000000,
            1000000, 1000000, NULL, 'pending', 'Bench Seed', '5814', NULL, 'USA', 'in_person',
            now() - interval '1 hour', now() - interval '1 hour', now() + interval '7 days'
     FROM cards c, generate_series(1, $1::int) k
     WHERE c.issuer = 'bench' AND c.id LIKE 'authorize-%'`,
    [OPEN_HOLDS]
  )
  await db.query("ANALYZE card_authorizations, card_network_events, events, event_sequences")
}

/** The authorizations stored since the reset (seeded holds left out): by answer, and the stand-ins. */
const storedSinceReset = async (db: pg.Client) => {
  const { rows } = await db.query<{ stored: string; approved: string; stand_in: string; reasons: string | null }>(
    `SELECT count(*) AS stored, count(*) FILTER (WHERE approved) AS approved,
            count(*) FILTER (WHERE reason = 'stand_in') AS stand_in,
            (SELECT string_agg(reason || ' ' || n, ', ') FROM (
               SELECT reason, count(*) AS n FROM card_authorizations
               WHERE id NOT LIKE 'seed-%' AND reason IS NOT NULL GROUP BY reason) r) AS reasons
     FROM card_authorizations WHERE id NOT LIKE 'seed-%'`
  )
  const row = rows[0]!
  return {
    stored: Number(row.stored),
    approved: Number(row.approved),
    standIn: Number(row.stand_in),
    reasons: row.reasons ?? "none"
  }
}

// ---------------------------------------------------------------------------------------------------
// Runs

/** µs of the monotonic clock (the clock of V8's CPU profiles). */
export const monotonicUs = () => Number(process.hrtime.bigint() / 1000n)
/**
 * A script preloaded into the service (`--require`) that profiles it from its start and writes the
 * profile when it exits (an in-thread inspector session answers synchronously, so it can in 'exit').
 */
export const profilerPreload = (tmp: string, dir: string) => {
  const file = path.join(tmp, "authorize-profiler.cjs")
  const out = JSON.stringify(path.join(path.resolve(dir), "service.cpuprofile"))
  writeFileSync(
    file,
    `const inspector = require("node:inspector")
const fs = require("node:fs")
const session = new inspector.Session()
session.connect()
session.post("Profiler.enable")
session.post("Profiler.setSamplingInterval", { interval: 1000 })
session.post("Profiler.start")
process.once("exit", () => {
  session.post("Profiler.stop", (error, result) => {
    if (!error) fs.writeFileSync(${out}, JSON.stringify(result.profile))
  })
})
`
  )
  return file
}

/** The measured runs' windows, for a profile (BENCH_AUTHORIZE_PROFILE). */
const windows: Array<{ readonly run: string; readonly startUs: number; readonly endUs: number }> = []

type Side = "service" | "peer"

type Load = (target: Target) => Promise<{ readonly tally: Tally; readonly wallMs: number; readonly lateMs?: number }>

interface Run {
  /** Approved answers a second: authorizations decided (a stand-in is an answer, not a decision). */
  readonly perSecond: number
  /** Over every answer, approved or not. */
  readonly p50: number
  readonly p99: number
  /** Server CPU, PostgreSQL CPU and this process's CPU per answered authorization, µs. */
  readonly serverCpuUs: number
  /** Of which system time (the kernel's, in the server's process). */
  readonly serverSystemUs: number
  readonly postgresCpuUs: number
  readonly benchCpuUs: number
  readonly answered: number
  /** Answers other than APPROVED (every card has far more than any run holds). */
  readonly declined: number
  readonly failures: number
  /** Rows stored since the reset (warm-up included) against the answers since the reset. */
  readonly stored: number
  readonly answeredSinceReset: number
  readonly standIn: number
  readonly reasons: string
  readonly lateMs: number
}

/**
 * Waits until the stored authorizations since the reset are as many as the answers, or stop
 * changing for 2 s (at most 30 s): a stand-in is recorded after its answer, retried until the
 * database takes it, and must not land in the next run.
 */
const settle = async (db: pg.Client, answers: number) => {
  const deadline = Date.now() + 30_000
  let last = -1
  let since = Date.now()
  for (;;) {
    const stored = await storedSinceReset(db)
    if (stored.stored === answers || Date.now() > deadline) return stored
    if (stored.stored !== last) {
      last = stored.stored
      since = Date.now()
    } else if (Date.now() - since > 2_000) return stored
    await sleep(250)
  }
}

/** One measured run from the common state: reset, warm-up, the load, then the stored rows settled. */
const measure = async (
  label: string,
  server: ServerProcess,
  target: Target,
  db: pg.Client,
  warm: Load,
  load: Load,
  progress: (line: string) => void
): Promise<Run> => {
  await resetState(db)
  const warmUp = await warm(target)
  if (answered(warmUp.tally) === 0) {
    throw new Error(`no authorization answered in the warm-up: ${[...warmUp.tally.samples].join("; ")}`)
  }
  const before = cpuMark(server)
  const startedUs = monotonicUs()
  const { tally, wallMs, lateMs } = await load(target)
  windows.push({ run: `${server.name} ${label}`, startUs: startedUs, endUs: monotonicUs() })
  const after = cpuMark(server)
  const count = answered(tally)
  const stored = await settle(db, count + answered(warmUp.tally))
  if (tally.failures > 0) progress(`  failures: ${[...tally.samples].join(" | ")}`)
  const approved = tally.results.get("APPROVED") ?? 0
  return {
    perSecond: (approved * 1000) / wallMs,
    p50: percentile(tally.latencies, 50),
    p99: percentile(tally.latencies, 99),
    serverCpuUs: ((after.server - before.server) * 1000) / count,
    serverSystemUs: ((after.serverSystem - before.serverSystem) * 1000) / count,
    postgresCpuUs: ((after.postgres - before.postgres) * 1000) / count,
    benchCpuUs: ((after.bench - before.bench) * 1000) / count,
    answered: count,
    declined: count - approved,
    failures: tally.failures,
    stored: stored.stored,
    answeredSinceReset: count + answered(warmUp.tally),
    standIn: stored.standIn,
    reasons: stored.reasons,
    lateMs: lateMs ?? 0
  }
}

const describe = (run: Run) =>
  `${run.perSecond.toFixed(0)} approved/s, p50 ${run.p50.toFixed(1)} ms, p99 ${run.p99.toFixed(1)} ms, ` +
  `CPU per authorization: server ${run.serverCpuUs.toFixed(0)} µs (system ${run.serverSystemUs.toFixed(0)}), PostgreSQL ${run.postgresCpuUs.toFixed(0)} µs, ` +
  `bench ${run.benchCpuUs.toFixed(0)} µs; ${run.answered} answers, ${run.declined} not approved, ${run.failures} failed; ` +
  `stored ${run.stored} rows for ${run.answeredSinceReset} answers since the reset (declines stored: ${run.reasons})` +
  (run.lateMs > 0 ? `; sender at most ${run.lateMs.toFixed(1)} ms late` : "")

// ---------------------------------------------------------------------------------------------------
// Statement counts

/** Statements per authorization, one request at a time through the counting proxy. */
const countStatements = async (target: Target, counter: Counter) => {
  const warm = newTally()
  for (let i = 0; i < 5; i++) await authorizeOnce(target, warm)
  const idleStart = counter.snapshot()
  await sleep(1_000)
  const idle = difference(counter.snapshot(), idleStart)
  const tally = newTally()
  const start = counter.snapshot()
  for (let i = 0; i < COUNTED; i++) await authorizeOnce(target, tally)
  const seen = difference(counter.snapshot(), start)
  if (tally.failures > 0) throw new Error(`counted authorizations failed: ${[...tally.samples].join("; ")}`)
  const perOp = (n: number) => (Number.isInteger(n / COUNTED) ? String(n / COUNTED) : (n / COUNTED).toFixed(2))
  return {
    perAuthorization: total(seen) / COUNTED,
    detail: [...seen]
      .sort((a, b) => b[1] - a[1])
      .map(([label, n]) => `${label} ${perOp(n)}`)
      .join(", "),
    idle: total(idle)
  }
}

// ---------------------------------------------------------------------------------------------------
// The section

const spreadOf = (values: ReadonlyArray<number>, digits = 0) =>
  `${Math.min(...values).toFixed(digits)} / ${median(values).toFixed(digits)} / ${Math.max(...values).toFixed(digits)}`

export const authorizeSection: Section = {
  name: "authorize",
  about: `card authorizations (signed ASA requests) at concurrency ${CONCURRENCY} and at ${RATE}/s: the service against a bare node:http + pg peer holding in one statement`,
  run: (ctx: BenchContext) =>
    Effect.gen(function* () {
      const devnet = yield* ctx.sharedDevnet
      const database = yield* runDatabase(ctx)
      const secret = formatSecret(randomBytes(24))
      const key = secretKey(secret)!
      const env = (dataDir: string, databaseUrl: string, extra: Record<string, string> = {}) =>
        serviceEnv({ ...ctx, databaseUrl }, devnet, dataDir, {
          CARD_SANDBOX_SECRET: secret,
          CARD_PROGRAM_KEY: PROGRAM_KEY,
          ...extra
        })
      const profileDir = process.env.BENCH_AUTHORIZE_PROFILE
      if (profileDir !== undefined) mkdirSync(profileDir, { recursive: true })
      const service = yield* startService(
        ctx,
        env(
          "authorize",
          database.url,
          profileDir === undefined ? {} : { NODE_OPTIONS: `--require ${profilerPreload(ctx.tmp, profileDir)}` }
        )
      )
      if (profileDir !== undefined) {
        // The bundle the service runs (a later `npm start` of changed sources rebuilds it): the
        // profile's line numbers are this copy's.
        copyFileSync(path.join(repoRoot, "dist", "src", "main.cjs"), path.join(profileDir, "main.cjs"))
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            writeFileSync(path.join(profileDir, "windows.json"), JSON.stringify(windows, null, 1))
            const logs = path.join(ctx.tmp, "logs")
            for (const file of readdirSync(logs).filter((name) => name.startsWith("service-"))) {
              copyFileSync(path.join(logs, file), path.join(profileDir, file))
            }
          })
        )
      }
      // The service has migrated the database; the peer reads and writes the same tables.
      const peer = yield* startPeer(ctx, "bareAuthorize", {
        DATABASE_URL: database.url,
        CARD_SECRET: secret,
        BALANCE_MAX_AGE_MS: "30000"
      })
      const db = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const client = new pg.Client({ connectionString: database.url })
          await client.connect()
          return client
        }),
        (client) => Effect.promise(() => client.end().catch(() => undefined))
      )
      const seeding = performance.now()
      yield* Effect.tryPromise({ try: () => seedCards(db, devnet), catch: (e) => e as Error })
      ctx.progress(
        `[authorize] ${CARDS} card holders inserted, their wallets funded on the devnet and followed by the service ` +
          `in ${((performance.now() - seeding) / 1000).toFixed(1)} s`
      )

      // Each server's own CPU with no request (its loops: the balance follower, the block watcher…).
      const idleCpu = { service: 0, peer: 0 }
      for (const side of ["service", "peer"] as const) {
        const server = side === "service" ? service : peer
        const before = { cpu: server.cpuMs(), at: performance.now() }
        yield* Effect.sleep(IDLE_SAMPLE_MS)
        idleCpu[side] = ((server.cpuMs() - before.cpu) * 1000) / (performance.now() - before.at)
      }
      ctx.progress(
        `[authorize] idle CPU: service ${idleCpu.service.toFixed(1)} ms/s, peer ${idleCpu.peer.toFixed(1)} ms/s`
      )

      // Concurrency 50 through 50 keep-alive sockets; the fixed rate with as many as its requests in
      // flight need (an open loop: nothing waits on this side for a socket).
      const targets = yield* Effect.acquireRelease(
        Effect.sync(() => {
          const of = (server: ServerProcess, maxSockets: number): Target => ({
            url: new URL("/card-network/messages", server.baseUrl),
            agent: new Agent({ keepAlive: true, maxSockets }),
            key
          })
          return {
            service: { closed: of(service, CONCURRENCY), open: of(service, Number.POSITIVE_INFINITY) },
            peer: { closed: of(peer, CONCURRENCY), open: of(peer, Number.POSITIVE_INFINITY) }
          }
        }),
        (all) =>
          Effect.sync(() => {
            for (const side of [all.service, all.peer]) {
              side.closed.agent.destroy()
              side.open.agent.destroy()
            }
          })
      )
      const servers: Record<Side, ServerProcess> = { service, peer }
      const sequential: Record<Side, Array<Run>> = { service: [], peer: [] }
      const closed: Record<Side, Array<Run>> = { service: [], peer: [] }
      const fixed: Record<Side, Array<Run>> = { service: [], peer: [] }
      const loads: Array<string> = []
      const fixedSeconds = Math.max(2, 2 * ctx.sizes.loadSeconds)

      for (let round = 0; round < ctx.sizes.rounds; round++) {
        loads.push(loadavg()[0]!.toFixed(2))
        for (const side of alternating<Side>(round, "service", "peer")) {
          const server = servers[side]
          const target = targets[side]
          const warmSeconds = round === 0 ? ctx.sizes.primeSeconds : ctx.sizes.warmSeconds
          const one = yield* Effect.promise(() =>
            measure(
              "c=1",
              server,
              target.closed,
              db,
              (t) => closedLoop(t, warmSeconds, 1),
              (t) => closedLoop(t, ctx.sizes.loadSeconds, 1),
              ctx.progress
            )
          )
          sequential[side].push(one)
          ctx.progress(`[authorize c=1] round ${round + 1}/${ctx.sizes.rounds} ${side}: ${describe(one)}`)
          const concurrent = yield* Effect.promise(() =>
            measure(
              `c=${CONCURRENCY}`,
              server,
              target.closed,
              db,
              (t) => closedLoop(t, ctx.sizes.warmSeconds, CONCURRENCY),
              (t) => closedLoop(t, ctx.sizes.loadSeconds, CONCURRENCY),
              ctx.progress
            )
          )
          closed[side].push(concurrent)
          ctx.progress(
            `[authorize c=${CONCURRENCY}] round ${round + 1}/${ctx.sizes.rounds} ${side}: ${describe(concurrent)}`
          )
          const steady = yield* Effect.promise(() =>
            measure(
              `${RATE}/s`,
              server,
              target.open,
              db,
              (t) => fixedRate(t, ctx.sizes.warmSeconds, RATE),
              (t) => fixedRate(t, fixedSeconds, RATE),
              ctx.progress
            )
          )
          fixed[side].push(steady)
          ctx.progress(`[authorize ${RATE}/s] round ${round + 1}/${ctx.sizes.rounds} ${side}: ${describe(steady)}`)
        }
      }
      loads.push(loadavg()[0]!.toFixed(2))

      // Statements per authorization, through a counting proxy, on instances of their own.
      const proxy = yield* startPgProxy(database.url)
      const countedService = yield* startService(
        ctx,
        env("authorize-counts", proxy.url, {
          // The follower (and the other loops) slowed, so that the window holds the requests' statements;
          // the first service's follower keeps the balances current meanwhile.
          CARD_BALANCE_POLL: "1 hour",
          CARD_BALANCE_MAX_AGE: "2 hours",
          RECONCILE_INTERVAL: "1 hour",
          PRICE_REFRESH_INTERVAL: "1 hour"
        })
      )
      const countedPeer = yield* startPeer(ctx, "bareAuthorize", {
        DATABASE_URL: proxy.url,
        CARD_SECRET: secret,
        BALANCE_MAX_AGE_MS: "30000"
      })
      const countTargets = yield* Effect.acquireRelease(
        Effect.sync(() =>
          [countedService, countedPeer].map(
            (server): Target => ({
              url: new URL("/card-network/messages", server.baseUrl),
              agent: new Agent({ keepAlive: true, maxSockets: 1 }),
              key
            })
          )
        ),
        (all) =>
          Effect.sync(() => {
            for (const target of all) target.agent.destroy()
          })
      )
      const serviceCounts = yield* Effect.promise(() => countStatements(countTargets[0]!, proxy.counter))
      const peerCounts = yield* Effect.promise(() => countStatements(countTargets[1]!, proxy.counter))

      const errors = (list: Record<Side, Array<Run>>) =>
        [
          list.service.reduce((sum, run) => sum + run.failures + run.declined, 0),
          list.peer.reduce((sum, run) => sum + run.failures + run.declined, 0)
        ] as const
      const reference = "bare node:http + pg, same signature check, the hold in one statement, same tables"
      const row =
        (list: Record<Side, Array<Run>>, flow: string) =>
        (measure: string, better: RatioRow["better"], pick: (run: Run) => number): RatioRow => ({
          measure: `${flow}: ${measure}`,
          better,
          reference,
          service: list.service.map(pick),
          peer: list.peer.map(pick),
          errors: errors(list)
        })
      const sequentialRow = row(sequential, "card authorization, concurrency 1 (one after another)")
      const concurrentRow = row(closed, `card authorization, concurrency ${CONCURRENCY}`)
      const fixedRow = row(fixed, `card authorization at ${RATE}/s`)
      const ratios: Array<RatioRow> = [
        sequentialRow("approved authorizations/s", "higher", (run) => run.perSecond),
        sequentialRow("p50 decision latency, ms", "lower", (run) => run.p50),
        sequentialRow("server CPU per authorization, µs", "lower", (run) => run.serverCpuUs),
        sequentialRow("PostgreSQL CPU per authorization, µs", "lower", (run) => run.postgresCpuUs),
        concurrentRow("approved authorizations/s", "higher", (run) => run.perSecond),
        concurrentRow("p50 decision latency, ms", "lower", (run) => run.p50),
        concurrentRow("p99 decision latency, ms", "lower", (run) => run.p99),
        concurrentRow("server CPU per authorization, µs", "lower", (run) => run.serverCpuUs),
        concurrentRow("PostgreSQL CPU per authorization, µs", "lower", (run) => run.postgresCpuUs),
        fixedRow("p50 decision latency, ms", "lower", (run) => run.p50),
        fixedRow("p99 decision latency, ms", "lower", (run) => run.p99),
        fixedRow("server CPU per authorization, µs", "lower", (run) => run.serverCpuUs)
      ]

      const throughputRatio =
        median(closed.service.map((r) => r.perSecond)) / median(closed.peer.map((r) => r.perSecond))
      const fixedP99 = median(fixed.service.map((r) => r.p99))
      const all = [
        ...sequential.service,
        ...sequential.peer,
        ...closed.service,
        ...closed.peer,
        ...fixed.service,
        ...fixed.peer
      ]
      const unstored = all.filter((run) => run.stored !== run.answeredSinceReset)
      const checks = [
        `authorize: ${CARDS} cards (inserted directly; USD1 on the devnet, read by the service's balance follower), ` +
          `${OPEN_HOLDS} open holds each at the start of every run; load average (1 min) at each round's start and at ` +
          `the end: ${loads.join(", ")}.`,
        `authorize: throughput service/peer (medians) ${throughputRatio.toFixed(2)}× (target ≥ ${TARGET_THROUGHPUT_RATIO}×: ` +
          `${throughputRatio >= TARGET_THROUGHPUT_RATIO ? "met" : "NOT MET"}); service authorizations/s min / median / max ` +
          `${spreadOf(closed.service.map((r) => r.perSecond))}, peer ${spreadOf(closed.peer.map((r) => r.perSecond))}.`,
        `authorize: service p99 at ${RATE}/s (median of runs) ${fixedP99.toFixed(1)} ms (target ≤ ${TARGET_P99_MS} ms: ` +
          `${fixedP99 <= TARGET_P99_MS ? "met" : "NOT MET"}); each run's p99 ${fixed.service.map((r) => r.p99.toFixed(1)).join(", ")} ms.`,
        `authorize: answers other than APPROVED (service / peer): ` +
          `${errors(sequential)[0] + errors(closed)[0] + errors(fixed)[0]} / ` +
          `${errors(sequential)[1] + errors(closed)[1] + errors(fixed)[1]} (failed requests included); stand-ins stored ` +
          `by the service: ${[...sequential.service, ...closed.service, ...fixed.service].reduce((sum, run) => sum + run.standIn, 0)}; ` +
          `runs whose stored rows differ from their answers (a request given up here after ${REQUEST_TIMEOUT_MS / 1000} s ` +
          `of silence may still be stored): ${unstored.length === 0 ? "none" : unstored.map((run) => `${run.stored} rows for ${run.answeredSinceReset} answers`).join(", ")}.`
      ]
      const counts: Array<CountRow> = [
        {
          flow: "card authorization (the service)",
          rpc: undefined,
          sql: serviceCounts.perAuthorization,
          detail: `${serviceCounts.detail} (${serviceCounts.idle} statement(s) in 1 s idle before)`
        },
        {
          flow: "card authorization (bare peer)",
          rpc: undefined,
          sql: peerCounts.perAuthorization,
          detail: `${peerCounts.detail} (${peerCounts.idle} statement(s) in 1 s idle before)`
        }
      ]
      return { ratios, counts, checks }
    })
}
