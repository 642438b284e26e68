/**
 * (h) x402 pay on a remote chain: the devnet switched to 1-second blocks (automine off, interval
 * mining 1 s), reached through a proxy that holds every JSON-RPC request for 50 ms before it
 * forwards it — a provider one round trip away, as on a public chain. Measured:
 *
 * - the service behind the delay against the same service with no delay (same 1-second blocks),
 *   concurrency 50: how much of its rate the round trip costs;
 * - the service against the reference x402 server, both behind the same delay, concurrency 10, 50
 *   and 200;
 * - two replicas (two relayer keys, one database) against one, behind the delay, concurrency 50;
 * - JSON-RPC calls per payment by method, counted at the proxy.
 *
 * Every run gets a fresh devnet (payers funded while it still automines), fresh processes, and checks
 * on chain that the merchant received exactly one amount per settled payment.
 */
import { Effect } from "effect"
import { ANVIL_ACCOUNT_KEYS, type Devnet, startDevnet } from "../src/chain/Devnet.js"
import {
  alternating,
  type BenchContext,
  type CountRow,
  percentile,
  type RatioRow,
  receivedMatches,
  runConcurrently,
  runDatabase,
  type Section,
  serviceEnv,
  startPeer,
  startService
} from "./harness.js"
import {
  createOrder,
  expectSettled,
  fundedPayers,
  merchantBalance,
  type PayFlow,
  payingFetch,
  REFERENCE_NAME,
  referenceEnv,
  referencePayment
} from "./pay.js"
import { type Counts, difference, startRpcProxy, total } from "./proxies.js"

/** A provider's round trip. */
const RPC_DELAY_MS = 50
/** The second replica's relayer: a funded devnet account no other part of the bench sends from. */
const SECOND_RELAYER_KEY = ANVIL_ACCOUNT_KEYS[7]!

/** Where a run's servers reach the chain, and how many serve it. */
interface Setup {
  readonly delayed: boolean
  readonly replicas: 1 | 2
}

interface RemoteRun {
  readonly perSecond: number
  readonly p50: number
  readonly failures: number
  readonly onChainMatches: boolean
  /** JSON-RPC calls per settled payment during the measured part, by method. */
  readonly callsPerPayment: Counts
  readonly settled: number
}

const rpc = (devnet: Devnet, method: string, params: ReadonlyArray<unknown>) =>
  Effect.promise(async () => {
    const response = await fetch(devnet.rpcUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params })
    })
    const body = (await response.json()) as { error?: { message: string } }
    if (body.error !== undefined) throw new Error(`${method}: ${body.error.message}`)
  })

type Side = "service" | "reference"

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/**
 * The service: an order, then its paid request. A settlement the service could not see mined while
 * the request waited answers 202 `settling`; the client then reads the order until it is paid, as a
 * card app does, and the payment counts when it is (a minute at most, or it failed).
 */
const servicePaymentUntilPaid =
  (baseUrl: string): PayFlow =>
  async (payFetch) => {
    const order = await createOrder(baseUrl)
    const response = await payFetch(`${baseUrl}/merchant/orders/${order.id}/pay`, { method: "POST" })
    if (response.status !== 202) return expectSettled(response)
    await response.arrayBuffer()
    const giveUp = performance.now() + 60_000
    while (performance.now() < giveUp) {
      await sleep(250)
      const { status } = (await (await fetch(`${baseUrl}/merchant/orders/${order.id}`)).json()) as { status: string }
      if (status === "paid") return
      if (status !== "settling") throw new Error(`order ${order.id} went from settling to ${status}`)
    }
    throw new Error(`order ${order.id} still settling after a minute`)
  }

const remoteRun = (ctx: BenchContext, side: Side, setup: Setup, concurrency: number, payments: number, runId: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const devnet = yield* startDevnet()
      const payers = yield* fundedPayers(devnet, concurrency)
      yield* rpc(devnet, "evm_setAutomine", [false])
      yield* rpc(devnet, "evm_setIntervalMining", [1])
      const proxy = yield* startRpcProxy(devnet.rpcUrl, setup.delayed ? { delayMs: RPC_DELAY_MS } : {})
      // Receipts read at half the block time, as a block watcher would (the default for a configured
      // chain is one second).
      const database = yield* runDatabase(ctx)
      const chainSettings = { CHAIN_RPC_URL: proxy.url, CHAIN_POLL_INTERVAL: "500 millis" }
      const servers =
        side === "reference"
          ? [yield* startPeer(ctx, "x402Reference", referenceEnv(devnet, proxy.url))]
          : yield* Effect.all(
              Array.from({ length: setup.replicas }, (_, replica) =>
                startService(
                  ctx,
                  serviceEnv({ ...ctx, databaseUrl: database.url }, devnet, `${runId}-${replica}`, {
                    ...chainSettings,
                    ...(replica === 0 ? {} : { RELAYER_PRIVATE_KEY: SECOND_RELAYER_KEY })
                  })
                )
              )
            )
      const flows = servers.map((server) =>
        side === "service" ? servicePaymentUntilPaid(server.baseUrl) : referencePayment(server.baseUrl)
      )
      const fetches = payers.map((payer) => payingFetch(payer, devnet))
      // Workers are spread over the replicas as a load balancer would.
      const pay = (worker: number) => flows[worker % flows.length]!(fetches[worker]!)

      const warm = yield* Effect.promise(() => runConcurrently(concurrency, Math.min(concurrency, 20), pay))
      if (warm.latencies.length === 0) {
        return yield* Effect.fail(new Error(`${side} paid nothing: ${warm.failureSamples.join("; ")}`))
      }
      const balanceBefore = yield* merchantBalance(devnet)
      const callsBefore = proxy.counter.snapshot()
      const outcome = yield* Effect.promise(() => runConcurrently(concurrency, payments, pay))
      const calls = difference(proxy.counter.snapshot(), callsBefore)
      const received = (yield* merchantBalance(devnet)) - balanceBefore
      const settled = outcome.latencies.length
      if (outcome.failures > 0) ctx.progress(`  ${side} failures: ${outcome.failureSamples.join(" | ")}`)
      return {
        perSecond: (settled * 1000) / outcome.wallMs,
        p50: percentile(outcome.latencies, 50),
        failures: outcome.failures,
        onChainMatches: receivedMatches(received, settled),
        callsPerPayment: new Map([...calls].map(([method, n]) => [method, n / Math.max(settled, 1)] as const)),
        settled
      } satisfies RemoteRun
    })
  )

/** One comparison: `measured` against `baseline`, alternating which goes first. */
interface Comparison {
  readonly label: string
  readonly concurrency: number
  readonly measured: { readonly side: Side; readonly setup: Setup; readonly name: string }
  readonly baseline: { readonly side: Side; readonly setup: Setup; readonly name: string }
}

const delayedOne: Setup = { delayed: true, replicas: 1 }
const service = (setup: Setup, name: string) => ({ side: "service" as const, setup, name })

const comparisons = (ctx: BenchContext): ReadonlyArray<Comparison> => [
  {
    label: `service behind a ${RPC_DELAY_MS} ms round trip vs no delay, concurrency 50`,
    concurrency: 50,
    measured: service(delayedOne, "service, delayed"),
    baseline: service({ delayed: false, replicas: 1 }, "the same service with no delay")
  },
  ...ctx.sizes.remoteConcurrencies.map((concurrency) => ({
    label: `service vs reference, both behind a ${RPC_DELAY_MS} ms round trip, concurrency ${concurrency}`,
    concurrency,
    measured: service(delayedOne, "service, delayed"),
    baseline: { side: "reference" as const, setup: delayedOne, name: `${REFERENCE_NAME}, delayed` }
  })),
  // At 50 one replica makes a block per cycle already (nothing for a second to add); at 200 it is saturated.
  ...[50, 200].map((concurrency) => ({
    label: `two replicas vs one, behind a ${RPC_DELAY_MS} ms round trip, concurrency ${concurrency}`,
    concurrency,
    measured: service({ delayed: true, replicas: 2 }, "two replicas, delayed"),
    baseline: service(delayedOne, "one replica, delayed")
  }))
]

/**
 * The blocks a worker's cycle (pay, wait, pay again) takes: a closed loop answered block by block
 * settles `concurrency` payments per cycle, so on 1-second blocks this is concurrency ÷ rate.
 */
const blocksPerCycle = (concurrency: number, run: RemoteRun) => concurrency / Math.max(run.perSecond, 1e-9)

const describeCalls = (runs: ReadonlyArray<RemoteRun>) => {
  const methods = new Map<string, number>()
  for (const run of runs) {
    for (const [method, n] of run.callsPerPayment) methods.set(method, (methods.get(method) ?? 0) + n / runs.length)
  }
  return {
    total: total(methods),
    detail: [...methods]
      .sort(([, a], [, b]) => b - a)
      .map(([method, n]) => `${method} ${n.toFixed(2)}`)
      .join(", ")
  }
}

export const remoteSection: Section = {
  name: "remote",
  about: `x402 pay with 1-second blocks behind a ${RPC_DELAY_MS} ms JSON-RPC round trip: delay cost, reference, replicas`,
  run: (ctx) =>
    Effect.gen(function* () {
      const ratios: Array<RatioRow> = []
      const counts: Array<CountRow> = []
      const checks: Array<string> = []
      const counted = new Set<string>()
      // BENCH_REMOTE=<text>: only the comparisons whose label holds it (one measure, A/B against another checkout).
      const only = process.env.BENCH_REMOTE
      for (const comparison of comparisons(ctx).filter(({ label }) => only === undefined || label.includes(only))) {
        const payments = ctx.sizes.remotePayments(comparison.concurrency)
        const runs = { measured: [] as Array<RemoteRun>, baseline: [] as Array<RemoteRun> }
        for (let round = 0; round < ctx.sizes.rounds; round++) {
          for (const which of alternating(round, "measured" as const, "baseline" as const)) {
            const { side, setup, name } = comparison[which]
            const run = yield* remoteRun(
              ctx,
              side,
              setup,
              comparison.concurrency,
              payments,
              `remote-${comparison.concurrency}-${which}-${round}`
            )
            runs[which].push(run)
            ctx.progress(
              `[remote c=${comparison.concurrency}] round ${round + 1}/${ctx.sizes.rounds} ${name}: ` +
                `${run.perSecond.toFixed(1)}/s (${blocksPerCycle(comparison.concurrency, run).toFixed(1)} blocks a cycle), ` +
                `p50 ${run.p50.toFixed(0)} ms, ${run.failures} failed, ` +
                `${describeCalls([run]).total.toFixed(2)} JSON-RPC calls/payment` +
                (run.onChainMatches ? "" : ", ON-CHAIN MISMATCH")
            )
          }
        }
        const errors = [runs.measured, runs.baseline].map((list) =>
          list.reduce((sum, run) => sum + run.failures, 0)
        ) as [number, number]
        const row = (measure: string, better: RatioRow["better"], pick: (run: RemoteRun) => number) =>
          ratios.push({
            measure: `${comparison.label}: ${measure}`,
            better,
            reference: comparison.baseline.name,
            service: runs.measured.map(pick),
            peer: runs.baseline.map(pick),
            errors
          })
        row("settled payments/s", "higher", (run) => run.perSecond)
        row("1-second blocks per worker's cycle", "lower", (run) => blocksPerCycle(comparison.concurrency, run))
        row("p50 latency, ms", "lower", (run) => run.p50)
        for (const which of ["measured", "baseline"] as const) {
          const flow = `x402 pay, ${comparison[which].name}, concurrency ${comparison.concurrency}`
          if (!comparison[which].setup.delayed || counted.has(flow)) continue
          counted.add(flow)
          const calls = describeCalls(runs[which])
          counts.push({
            flow,
            rpc: calls.total,
            sql: undefined,
            detail: calls.detail
          })
        }
        checks.push(
          [...runs.measured, ...runs.baseline].every((run) => run.onChainMatches)
            ? `${comparison.label}: in every run the merchant received on chain exactly one amount per settled payment.`
            : `${comparison.label}: ON-CHAIN TRANSFERS DIFFER FROM SETTLED PAYMENTS (see the progress log).`
        )
      }
      return { ratios, counts, checks }
    })
}
