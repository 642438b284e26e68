/**
 * (j) card clearings settled on chain (issue 38): the settlement engine (CardSettlement) of one
 * replica turning clearings into `transferFrom(card wallet → settlement account)`s and settling
 * them, beside the same replica's x402 settlement, on the same devnet, in alternating runs.
 *
 * Set-up, per poll setting (CARD_SETTLEMENT_POLL: the default, 1 s, then 200 ms): a devnet of its
 * own behind the counting JSON-RPC proxy (proxies.ts), a database of its own, the service
 * started as `npm start` runs it with a known settlement account (CARD_PROGRAM_KEY, given gas with
 * anvil_setBalance), and CARDS card holders inserted directly as bench/authorize.ts inserts them:
 * a `users` and a `cards` row each, the spending allowance recorded, the wallet's USD1 and its
 * allowance for the settlement account written into USD1's storage (anvil_setStorageAt); the bench
 * waits until the service's balance follower has read them. Everything the bench itself sends to
 * the devnet goes to it directly, not through the proxy: the proxy counts the service's calls only.
 *
 * A clearings run inserts CLEARINGS clearings at once (one statement for their authorizations, one
 * for their `card_network_events` rows: kind 'clearing', money 'debit_pending', $0.01-$1.99 each,
 * on cards taken in turn) and measures the wall time from just before the insert until every one
 * is 'debited' (or 'owed': none should be), polling the database every 25 ms, and the JSON-RPC calls
 * the service made meanwhile. Afterwards the devnet mines CHAIN_CONFIRMATIONS blocks and the bench
 * waits for the engine to mark every transfer final, so that each run starts with nothing open.
 * An x402 run is the pay section's flow (bench/pay.ts: an order, then the paid request, by the
 * standard x402 client) at concurrency 10 on the same service and devnet, the same count of
 * payments as the pay section's, its JSON-RPC calls counted the same way.
 *
 * After the runs the receipts of every transfer are read (directly) for their gas, and of every x402
 * settlement for comparison; the transfers per block and the distinct cards per send batch say what
 * batching per block or per card could save (docs/performance.md, "Clearings").
 *
 * BENCH_CLEARINGS_PROFILE=<folder>: each setting's service runs with V8's CPU profiler on from its
 * start (as BENCH_AUTHORIZE_PROFILE does) and writes `<folder>/<setting>/service.cpuprofile` at its
 * exit, with `windows.json` (each measured run's start and end, µs of the profile's clock), the
 * service's log and the bundle it ran (`main.cjs`).
 */
import { createHash } from "node:crypto"
import { copyFileSync, mkdirSync, readdirSync, writeFileSync } from "node:fs"
import { loadavg } from "node:os"
import path from "node:path"
import { Effect } from "effect"
import pg from "pg"
import { encodeAbiParameters, getAddress, type Hex, keccak256, numberToHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { type Devnet, startDevnet } from "../src/chain/Devnet.js"
import { monotonicUs, profilerPreload } from "./authorize.js"
import {
  alternating,
  type BenchContext,
  type CountRow,
  median,
  percentile,
  type RatioRow,
  repoRoot,
  runConcurrently,
  runDatabase,
  type Section,
  type ServerProcess,
  serviceEnv,
  startService
} from "./harness.js"
import { fundedPayers, payingFetch, servicePayment } from "./pay.js"
import { type Counts, difference, startRpcProxy, total } from "./proxies.js"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** Each card wallet's USD1 and allowance: far above what the runs debit. */
const WALLET_USD1 = 1_000_000n * 10n ** 18n
/** The service's default on a configured chain (CHAIN_CONFIRMATIONS unset). */
const CONFIRMATIONS = 10
/** How long a run may take before the section fails. */
const RUN_LIMIT_MS = 300_000
const X402_CONCURRENCY = 10

const sizes = (ctx: BenchContext) =>
  ctx.sizes.payments[10] <= 20 // BENCH_QUICK
    ? { cards: 20, clearings: 60, warmClearings: 10 }
    : { cards: 200, clearings: 600, warmClearings: 50 }

const cardAddress = (i: number) =>
  getAddress(`0x${createHash("sha256").update(`clearings-holder-${i}`).digest("hex").slice(0, 40)}`)

// ---------------------------------------------------------------------------------------------------
// The devnet, directly

interface RpcCall {
  readonly method: string
  readonly params: ReadonlyArray<unknown>
}

/** JSON-RPC calls to the devnet, 200 to a batch request; the results in order. */
const rpcBatch = async (url: string, calls: ReadonlyArray<RpcCall>) => {
  const results: Array<unknown> = []
  for (let i = 0; i < calls.length; i += 200) {
    const response = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(calls.slice(i, i + 200).map((call, id) => ({ jsonrpc: "2.0", id, ...call })))
    })
    const answers = (await response.json()) as ReadonlyArray<{ id: number; result?: unknown; error?: unknown }>
    const failed = answers.find((answer) => answer.error !== undefined)
    if (failed !== undefined) throw new Error(`devnet refused ${JSON.stringify(failed.error)}`)
    results.push(...[...answers].sort((a, b) => a.id - b.id).map((answer) => answer.result))
  }
  return results
}

/** USD1 (OpenZeppelin's ERC20) keeps its balances in the mapping at slot 0. */
const balanceSlot = (owner: Hex) =>
  keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [owner, 0n]))

/** USD1's `_allowances[owner][spender]` slot (the mapping at slot 1). */
const allowanceSlot = (owner: Hex, spender: Hex) =>
  keccak256(
    encodeAbiParameters(
      [{ type: "address" }, { type: "bytes32" }],
      [spender, keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [owner, 1n]))]
    )
  )

// ---------------------------------------------------------------------------------------------------
// The database

const seedCards = async (db: pg.Client, devnet: Devnet, program: Hex, cards: number) => {
  const addresses = Array.from({ length: cards }, (_, i) => cardAddress(i + 1))
  await db.query("INSERT INTO users (address, created_at) SELECT unnest($1::text[]), now()", [addresses])
  await db.query(
    `INSERT INTO cards (id, address, issuer, issuer_ref, holder, number_sealed, cvv_sealed, last4, expiry,
                        document_hash, created_at)
     SELECT 'clearings-' || i, a, 'bench', 'clearings-' || i, 'Bench Holder', '\\x00'::bytea, '\\x00'::bytea,
            '0000', '12/30', decode(md5('clearings-doc-' || i) || md5('clearings-doc2-' || i), 'hex'), now()
     FROM unnest($1::text[]) WITH ORDINALITY AS t(a, i)`,
    [addresses]
  )
  await db.query(
    `INSERT INTO card_allowances (id, card_id, owner, spender, cap, permit_nonce, deadline, requested_at,
                                  submitted_at, tx_hash, tx_raw, seen_at)
     SELECT 'bench-' || c.id, c.id, c.address, $1, $2::numeric, 0, now() + interval '30 days', now(),
            now(), '0x', '0x', now()
     FROM cards c WHERE c.id LIKE 'clearings-%'`,
    [program, WALLET_USD1.toString()]
  )
  await rpcBatch(devnet.rpcUrl, [
    // Gas for the settlement account (a configured chain has no faucet: the operator funds it).
    { method: "anvil_setBalance", params: [program, numberToHex(10n ** 21n)] },
    ...addresses.flatMap((address) => [
      {
        method: "anvil_setStorageAt",
        params: [devnet.usd1, balanceSlot(address), numberToHex(WALLET_USD1, { size: 32 })]
      },
      {
        method: "anvil_setStorageAt",
        params: [devnet.usd1, allowanceSlot(address, program), numberToHex(WALLET_USD1, { size: 32 })]
      }
    ])
  ])
  // Mined into a block, so that the follower (which reads at its head) sees them.
  await rpcBatch(devnet.rpcUrl, [{ method: "anvil_mine", params: ["0x1"] }])
  const deadline = Date.now() + 120_000
  for (;;) {
    const { rows } = await db.query<{ followed: string; fresh: boolean | null }>(
      `SELECT (SELECT count(*) FROM card_wallet_balances WHERE address = ANY($1::text[]) AND usd1 > 0) AS followed,
              (SELECT checked_at > now() - interval '5 seconds' FROM card_balance_follower) AS fresh`,
      [addresses]
    )
    if (Number(rows[0]!.followed) === cards && rows[0]!.fresh === true) return
    if (Date.now() > deadline) {
      throw new Error(
        `the balance follower stored ${rows[0]!.followed} of ${cards} card wallets' balances within 120 s`
      )
    }
    await sleep(250)
  }
}

/** `count` clearings inserted at once (with the authorizations they clear), ids prefixed `prefix`. */
const insertClearings = async (db: pg.Client, prefix: string, count: number, cards: number) => {
  await db.query("BEGIN")
  await db.query(
    `INSERT INTO card_authorizations (id, card_id, address, network, message_id, approved, reason, requested_micros,
       approved_micros, held_micros, cleared_micros, available_after_micros, status, merchant_name, merchant_mcc,
       merchant_city, merchant_country, channel, created_at, updated_at, hold_expires_at)
     SELECT $1 || k, c.id, c.address, 'sandbox', $1 || k, true, NULL, m, m, 0, m, NULL, 'pending', 'Bench Coffee',
            '5814', 'Oakland', 'USA', 'in_person', now(), now(), now() + interval '7 days'
     FROM generate_series(1, $2::int) k
     CROSS JOIN LATERAL (SELECT 10000 + ((k * 7919) % 199) * 10000 AS m) amount
     JOIN cards c ON c.id = 'clearings-' || (1 + (k % $3::int))`,
    [prefix, count, cards]
  )
  await db.query(
    `INSERT INTO card_network_events (id, transaction_id, authorization_id, card_id, address, kind, amount_micros,
       approved, reason, money, merchant_name, merchant_mcc, merchant_city, merchant_country, created_at)
     SELECT 'ev-' || a.id, a.id, a.id, a.card_id, a.address, 'clearing', a.cleared_micros, true, NULL, 'debit_pending',
            a.merchant_name, a.merchant_mcc, a.merchant_city, a.merchant_country, now()
     FROM card_authorizations a WHERE a.id LIKE $1 || '%'`,
    [prefix]
  )
  await db.query("COMMIT")
}

const moneyOf = async (db: pg.Client, prefix: string) => {
  const { rows } = await db.query<{ debited: string; owed: string }>(
    `SELECT count(*) FILTER (WHERE money = 'debited') AS debited, count(*) FILTER (WHERE money = 'owed') AS owed
     FROM card_network_events WHERE id LIKE 'ev-' || $1 || '%'`,
    [prefix]
  )
  return { debited: Number(rows[0]!.debited), owed: Number(rows[0]!.owed) }
}

/** Mines CHAIN_CONFIRMATIONS blocks and waits until no transfer is left open (sent or mined, not final). */
const finalise = async (db: pg.Client, devnet: Devnet) => {
  await rpcBatch(devnet.rpcUrl, [{ method: "anvil_mine", params: [numberToHex(CONFIRMATIONS + 1)] }])
  const deadline = Date.now() + 30_000
  for (;;) {
    const { rows } = await db.query<{ open: string }>(
      "SELECT count(*) AS open FROM card_program_transfers WHERE state IN ('sent', 'mined')"
    )
    if (Number(rows[0]!.open) === 0) return 0
    if (Date.now() > deadline) return Number(rows[0]!.open)
    await sleep(100)
  }
}

// ---------------------------------------------------------------------------------------------------
// Runs

interface ClearingsRun {
  readonly perSecond: number
  readonly wallMs: number
  readonly rpc: Counts
  readonly callsPerClearing: number
  readonly cpuPerClearingMs: number
  /** From the insert to each clearing's settlement (settled_at), ms. */
  readonly p50: number
  readonly max: number
  readonly owed: number
  readonly blocks: number
  readonly stillOpen: number
}

interface PayRun {
  readonly perSecond: number
  readonly wallMs: number
  readonly rpc: Counts
  readonly callsPerPayment: number
  readonly cpuPerPaymentMs: number
  readonly p50: number
  readonly failures: number
}

const clearingsRun = async (
  db: pg.Client,
  devnet: Devnet,
  service: ServerProcess,
  rpc: { snapshot: () => Counts },
  prefix: string,
  count: number,
  cards: number
): Promise<ClearingsRun> => {
  const before = rpc.snapshot()
  const cpuBefore = service.cpuMs()
  const started = performance.now()
  await insertClearings(db, prefix, count, cards)
  let money = { debited: 0, owed: 0 }
  for (;;) {
    money = await moneyOf(db, prefix)
    if (money.debited + money.owed >= count) break
    if (performance.now() - started > RUN_LIMIT_MS) {
      throw new Error(`${money.debited} of ${count} clearings debited (${money.owed} owed) in ${RUN_LIMIT_MS / 1000} s`)
    }
    await sleep(25)
  }
  const wallMs = performance.now() - started
  const seen = difference(rpc.snapshot(), before)
  const cpu = service.cpuMs() - cpuBefore
  const { rows } = await db.query<{ ms: number; block: string }>(
    `SELECT extract(epoch FROM t.settled_at - e.created_at) * 1000 AS ms, t.block
     FROM card_program_transfers t JOIN card_network_events e ON e.id = t.event_id
     WHERE e.id LIKE 'ev-' || $1 || '%'`,
    [prefix]
  )
  const latencies = rows.map((row) => Number(row.ms))
  const stillOpen = await finalise(db, devnet)
  return {
    perSecond: (count * 1000) / wallMs,
    wallMs,
    rpc: seen,
    callsPerClearing: total(seen) / count,
    cpuPerClearingMs: cpu / count,
    p50: percentile(latencies, 50),
    max: Math.max(...latencies),
    owed: money.owed,
    blocks: new Set(rows.map((row) => row.block)).size,
    stillOpen
  }
}

const payRun = async (
  service: ServerProcess,
  rpc: { snapshot: () => Counts },
  pay: (worker: number) => Promise<void>,
  payments: number
): Promise<PayRun> => {
  const before = rpc.snapshot()
  const cpuBefore = service.cpuMs()
  const outcome = await runConcurrently(X402_CONCURRENCY, payments, pay)
  const seen = difference(rpc.snapshot(), before)
  const settled = outcome.latencies.length
  if (settled === 0) throw new Error(`x402 paid nothing: ${outcome.failureSamples.join("; ")}`)
  return {
    perSecond: (settled * 1000) / outcome.wallMs,
    wallMs: outcome.wallMs,
    rpc: seen,
    callsPerPayment: total(seen) / settled,
    cpuPerPaymentMs: (service.cpuMs() - cpuBefore) / settled,
    p50: percentile(outcome.latencies, 50),
    failures: outcome.failures
  }
}

/** "multicall: a + b + a + b" as "multicall: 2× (a + b)". */
const shortLabel = (label: string) =>
  label.replace(/multicall: (.+)\)$/, (_, calls: string) => {
    const parts = calls.split(" + ")
    for (let width = 1; width <= parts.length; width++) {
      if (parts.length % width !== 0) continue
      const unit = parts.slice(0, width)
      if (parts.every((part, i) => part === unit[i % width])) {
        return `multicall: ${parts.length / width}× (${unit.join(" + ")}))`
      }
    }
    return `multicall: ${calls})`
  })

const breakdown = (counts: Counts, ops: number) =>
  [...counts]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([label, n]) => `${shortLabel(label)} ${(n / ops).toFixed(n / ops >= 10 ? 1 : 3)}`)
    .join(", ")

const sum = (all: ReadonlyArray<Counts>) => {
  const out = new Map<string, number>()
  for (const counts of all) for (const [label, n] of counts) out.set(label, (out.get(label) ?? 0) + n)
  return out
}

const spreadOf = (values: ReadonlyArray<number>, digits = 1) =>
  `${Math.min(...values).toFixed(digits)} / ${median(values).toFixed(digits)} / ${Math.max(...values).toFixed(digits)}`

/** gasUsed of each receipt of `hashes`, read directly from the devnet. */
const gasUsed = async (devnet: Devnet, hashes: ReadonlyArray<string>) =>
  (await rpcBatch(
    devnet.rpcUrl,
    hashes.map((hash) => ({ method: "eth_getTransactionReceipt", params: [hash] }))
  )) as ReadonlyArray<{ gasUsed: Hex; blockNumber: Hex } | null>

// ---------------------------------------------------------------------------------------------------
// The section

type Side = "clearings" | "x402"

interface Variant {
  readonly label: string
  readonly poll: string | undefined
  /** A remote provider's round trip added by the proxy to every JSON-RPC request (as bench/remote.ts does). */
  readonly rpcDelayMs?: number
}

/** A provider's round trip, as bench/remote.ts takes it. */
const RPC_DELAY_MS = 50

const VARIANTS: ReadonlyArray<Variant> = [
  { label: "CARD_SETTLEMENT_POLL default (1 s)", poll: undefined },
  { label: "CARD_SETTLEMENT_POLL=200 ms", poll: "200 millis" },
  {
    label: `CARD_SETTLEMENT_POLL default (1 s), ${RPC_DELAY_MS} ms per JSON-RPC round trip`,
    poll: undefined,
    rpcDelayMs: RPC_DELAY_MS
  }
]

export const clearingsSection: Section = {
  name: "clearings",
  about:
    "card clearings debited on chain (transferFrom per clearing) on one replica: clearings settled/s and JSON-RPC calls per clearing, beside x402 settlement on the same devnet",
  run: (ctx: BenchContext) =>
    Effect.gen(function* () {
      const size = sizes(ctx)
      const ratios: Array<RatioRow> = []
      const counts: Array<CountRow> = []
      const checks: Array<string> = []
      const payments = ctx.sizes.payments[10]

      for (const [index, variant] of VARIANTS.entries()) {
        const result = yield* Effect.scoped(
          Effect.gen(function* () {
            // A devnet of its own per setting: the relayer's and the settlement account's nonces start afresh.
            const devnet = yield* startDevnet()
            const database = yield* runDatabase(ctx)
            const proxy = yield* startRpcProxy(
              devnet.rpcUrl,
              variant.rpcDelayMs === undefined ? {} : { delayMs: variant.rpcDelayMs }
            )
            const programKey = generatePrivateKey()
            const program = privateKeyToAccount(programKey).address
            const profileRoot = process.env.BENCH_CLEARINGS_PROFILE
            const profileDir = profileRoot === undefined ? undefined : path.resolve(profileRoot, String(index))
            if (profileDir !== undefined) mkdirSync(profileDir, { recursive: true })
            const windows: Array<{ readonly run: string; readonly startUs: number; readonly endUs: number }> = []
            const service = yield* startService(
              ctx,
              serviceEnv(
                { ...ctx, databaseUrl: database.url },
                { ...devnet, rpcUrl: proxy.url },
                `clearings-${index}`,
                {
                  CARD_PROGRAM_KEY: programKey,
                  ...(variant.poll === undefined ? {} : { CARD_SETTLEMENT_POLL: variant.poll }),
                  ...(profileDir === undefined
                    ? {}
                    : { NODE_OPTIONS: `--require ${profilerPreload(ctx.tmp, profileDir)}` })
                }
              )
            )
            if (profileDir !== undefined) {
              copyFileSync(path.join(repoRoot, "dist", "src", "main.cjs"), path.join(profileDir, "main.cjs"))
              // Added after the service: runs before it is stopped (the log so far) — the profile
              // itself is written by the service at its exit.
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
            const db = yield* Effect.acquireRelease(
              Effect.promise(async () => {
                const client = new pg.Client({ connectionString: database.url })
                await client.connect()
                return client
              }),
              (client) => Effect.promise(() => client.end().catch(() => undefined))
            )
            const seeding = performance.now()
            yield* Effect.tryPromise({
              try: () => seedCards(db, devnet, program, size.cards),
              catch: (e) => e as Error
            })
            ctx.progress(
              `[clearings ${variant.label}] ${size.cards} cards seeded and followed in ${((performance.now() - seeding) / 1000).toFixed(1)} s`
            )
            const payers = yield* fundedPayers(devnet, X402_CONCURRENCY)
            const fetches = payers.map((payer) => payingFetch(payer, devnet))
            const flow = servicePayment(service.baseUrl)
            const pay = (worker: number) => flow(fetches[worker]!)

            // Warm-ups: the first clearings (the gas estimate, the JIT) and the first payments.
            const warm = yield* Effect.promise(() =>
              clearingsRun(db, devnet, service, proxy.counter, `w${index}-`, size.warmClearings, size.cards)
            )
            ctx.progress(`[clearings ${variant.label}] warm-up: ${warm.perSecond.toFixed(1)} clearings/s`)
            const warmPay = yield* Effect.promise(() => runConcurrently(X402_CONCURRENCY, ctx.sizes.warmPayments, pay))
            if (warmPay.latencies.length === 0) {
              return yield* Effect.fail(new Error(`x402 paid nothing: ${warmPay.failureSamples.join("; ")}`))
            }

            // What the service calls with nothing to do (the block watcher, the balance follower…).
            const idleStart = proxy.counter.snapshot()
            yield* Effect.sleep("3 seconds")
            const idle = difference(proxy.counter.snapshot(), idleStart)
            const idlePerSecond = total(idle) / 3

            const runs: { clearings: Array<ClearingsRun>; x402: Array<PayRun> } = { clearings: [], x402: [] }
            const loads: Array<string> = []
            for (let round = 0; round < ctx.sizes.rounds; round++) {
              loads.push(loadavg()[0]!.toFixed(2))
              for (const side of alternating<Side>(round, "clearings", "x402")) {
                const startUs = monotonicUs()
                if (side === "clearings") {
                  const run = yield* Effect.promise(() =>
                    clearingsRun(db, devnet, service, proxy.counter, `r${index}-${round}-`, size.clearings, size.cards)
                  )
                  windows.push({ run: `clearings ${round}`, startUs, endUs: startUs + run.wallMs * 1000 })
                  runs.clearings.push(run)
                  ctx.progress(
                    `[clearings ${variant.label}] round ${round + 1}/${ctx.sizes.rounds} clearings: ${run.perSecond.toFixed(1)}/s ` +
                      `(${size.clearings} in ${(run.wallMs / 1000).toFixed(2)} s), ${run.callsPerClearing.toFixed(2)} calls/clearing ` +
                      `[${breakdown(run.rpc, size.clearings)}], settled p50 ${run.p50.toFixed(0)} ms max ${run.max.toFixed(0)} ms, ` +
                      `CPU ${run.cpuPerClearingMs.toFixed(2)} ms/clearing, ${run.blocks} blocks, ${run.owed} owed` +
                      (run.stillOpen > 0 ? `, ${run.stillOpen} STILL OPEN after the confirmations` : "")
                  )
                } else {
                  const run = yield* Effect.promise(() => payRun(service, proxy.counter, pay, payments))
                  windows.push({ run: `x402 ${round}`, startUs, endUs: startUs + run.wallMs * 1000 })
                  runs.x402.push(run)
                  ctx.progress(
                    `[clearings ${variant.label}] round ${round + 1}/${ctx.sizes.rounds} x402: ${run.perSecond.toFixed(1)}/s, ` +
                      `${run.callsPerPayment.toFixed(2)} calls/payment [${breakdown(run.rpc, payments)}], p50 ${run.p50.toFixed(0)} ms, ` +
                      `CPU ${run.cpuPerPaymentMs.toFixed(2)} ms/payment, ${run.failures} failed`
                  )
                }
              }
            }
            loads.push(loadavg()[0]!.toFixed(2))

            // Gas of every transfer, and of the x402 settlements, from their receipts.
            const transfers = yield* Effect.promise(() =>
              db.query<{ mined_hash: string; signed_at: Date; card_id: string; block: string }>(
                "SELECT mined_hash, signed_at, card_id, block FROM card_program_transfers WHERE mined_hash IS NOT NULL ORDER BY nonce"
              )
            )
            const transferGas = (yield* Effect.promise(() =>
              gasUsed(
                devnet,
                transfers.rows.map((row) => row.mined_hash)
              )
            )).map((receipt) => Number(BigInt(receipt!.gasUsed)))
            const relayed = yield* Effect.promise(() =>
              db.query<{ tx_hash: string }>(
                "SELECT tx_hash FROM relayed_transactions WHERE status IN ('mined', 'final') ORDER BY created_at DESC LIMIT 200"
              )
            )
            const payGas = (yield* Effect.promise(() =>
              gasUsed(
                devnet,
                relayed.rows.map((row) => row.tx_hash)
              )
            ))
              .filter((receipt) => receipt !== null)
              .map((receipt) => Number(BigInt(receipt.gasUsed)))
            // Per send batch (one tick's signatures share signed_at): transfers and distinct cards.
            const batches = new Map<number, { transfers: number; cards: Set<string> }>()
            for (const row of transfers.rows) {
              const key = row.signed_at.getTime()
              const batch = batches.get(key) ?? { transfers: 0, cards: new Set<string>() }
              batch.transfers++
              batch.cards.add(row.card_id)
              batches.set(key, batch)
            }
            const perBlock = new Map<string, number>()
            for (const row of transfers.rows) perBlock.set(row.block, (perBlock.get(row.block) ?? 0) + 1)
            return {
              variant,
              runs,
              idle,
              idlePerSecond,
              loads,
              transferGas,
              payGas,
              batchSizes: [...batches.values()].map((batch) => batch.transfers),
              batchCards: [...batches.values()].map((batch) => batch.cards.size),
              perBlock: [...perBlock.values()]
            }
          })
        )
        const { runs } = result
        const reference = `x402 pay at concurrency ${X402_CONCURRENCY} (bench/pay.ts's flow), the same service and devnet, alternating`
        const row = (measure: string, better: RatioRow["better"], service: Array<number>, peer: Array<number>) =>
          ratios.push({
            measure: `card clearings, ${variant.label}: ${measure}`,
            better,
            reference,
            service,
            peer,
            errors: [
              runs.clearings.reduce((s, run) => s + run.owed, 0),
              runs.x402.reduce((s, run) => s + run.failures, 0)
            ]
          })
        row(
          "clearings settled/s (service) vs x402 payments settled/s (reference)",
          "higher",
          runs.clearings.map((run) => run.perSecond),
          runs.x402.map((run) => run.perSecond)
        )
        row(
          "JSON-RPC calls per clearing vs per x402 payment",
          "lower",
          runs.clearings.map((run) => run.callsPerClearing),
          runs.x402.map((run) => run.callsPerPayment)
        )
        row(
          "server CPU per clearing vs per x402 payment, ms",
          "lower",
          runs.clearings.map((run) => run.cpuPerClearingMs),
          runs.x402.map((run) => run.cpuPerPaymentMs)
        )
        const clearingCalls = sum(runs.clearings.map((run) => run.rpc))
        const payCalls = sum(runs.x402.map((run) => run.rpc))
        const clearingOps = runs.clearings.length * size.clearings
        const payOps = runs.x402.length * payments
        counts.push(
          {
            flow: `card clearing, settled (${variant.label}; ${size.clearings} at once, all rounds)`,
            rpc: total(clearingCalls) / clearingOps,
            sql: undefined,
            detail: breakdown(clearingCalls, clearingOps)
          },
          {
            flow: `x402 payment, same service (${variant.label}; concurrency ${X402_CONCURRENCY})`,
            rpc: total(payCalls) / payOps,
            sql: undefined,
            detail: breakdown(payCalls, payOps)
          },
          {
            flow: `idle service, 1 s (${variant.label})`,
            rpc: result.idlePerSecond,
            sql: undefined,
            detail: breakdown(result.idle, 3)
          }
        )
        const gasSpread = (values: ReadonlyArray<number>) => (values.length === 0 ? "–" : spreadOf(values, 0))
        checks.push(
          `clearings (${variant.label}): ${size.cards} cards, ${size.clearings} clearings per run; clearings/s min / median / max ` +
            `${spreadOf(runs.clearings.map((run) => run.perSecond))}, x402 payments/s ${spreadOf(runs.x402.map((run) => run.perSecond))}; ` +
            `wall s per run ${runs.clearings.map((run) => (run.wallMs / 1000).toFixed(2)).join(", ")}; each clearing's settlement ` +
            `after its insert p50 ${spreadOf(
              runs.clearings.map((run) => run.p50),
              0
            )} ms, max ${spreadOf(
              runs.clearings.map((run) => run.max),
              0
            )} ms; ` +
            `blocks per run ${runs.clearings.map((run) => run.blocks).join(", ")}; owed ${runs.clearings.reduce((s, run) => s + run.owed, 0)}; ` +
            `x402 failures ${runs.x402.reduce((s, run) => s + run.failures, 0)}; load average (1 min) at each round's start and at the end: ${result.loads.join(", ")}.`,
          `clearings (${variant.label}) gas: transferFrom gasUsed min / median / max ${gasSpread(result.transferGas)} over ` +
            `${result.transferGas.length} transfers; x402 transferWithAuthorization ${gasSpread(result.payGas)} over ${result.payGas.length}; ` +
            `transfers per send batch (one tick) ${gasSpread(result.batchSizes)}, distinct cards per batch ${gasSpread(result.batchCards)}; ` +
            `transfers per block ${gasSpread(result.perBlock)} over ${result.perBlock.length} blocks.`
        )
      }
      return { ratios, counts, checks }
    })
}
