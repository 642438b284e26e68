/**
 * (a) x402 pay: the service against the reference x402 server, at concurrency 10 and 1 after a
 * warm-up, and at concurrency 10 right after boot (no warm-up: the JIT and the caches are cold).
 *
 * Every run gets a fresh devnet, fresh payers funded with USD1 by the deployer (one per worker)
 * and a fresh server process. The same standard client (`@x402/fetch` + `@x402/evm`) pays both.
 * On the service one payment is: create an order, then the paid request (402, sign, retry with
 * PAYMENT-SIGNATURE). The reference has no orders: one payment is its 402 and paid request, at
 * the order's price. A run counts a payment settled only on 200 with a successful PAYMENT-RESPONSE,
 * and checks on chain that the merchant received exactly one amount per settled payment.
 */
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch"
import { Effect } from "effect"
import { createPublicClient, erc20Abi, http } from "viem"
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts"
import { type Devnet, startDevnet } from "../src/chain/Devnet.js"
import { mintUsd1 } from "../src/chain/DevnetOperator.js"
import {
  alternating,
  type BenchContext,
  expectJson,
  MERCHANT,
  ORDER_AMOUNT_ATOMIC,
  ORDER_AMOUNT_USD,
  PAYMENT_CAP_ATOMIC,
  percentile,
  type RatioRow,
  RELAYER_KEY,
  receivedMatches,
  runConcurrently,
  runDatabase,
  type Section,
  type ServerProcess,
  serviceEnv,
  startPeer,
  startService
} from "./harness.js"

export const REFERENCE_NAME = "reference x402 server: @x402/express 2.27 + in-process facilitator"

/** A standard x402 v2 client paying with `account`; it accepts USD1 on this devnet up to one order. */
export const payingFetch = (account: PrivateKeyAccount, devnet: Devnet, baseFetch: typeof fetch = fetch) => {
  const client = new x402Client()
  registerExactEvmScheme(client, { signer: account })
  client.setSpendControls({
    allowedAssets: [
      {
        network: `eip155:${devnet.chainId}`,
        asset: devnet.usd1,
        maxAmountPerPayment: PAYMENT_CAP_ATOMIC.toString()
      }
    ]
  })
  return wrapFetchWithPayment(baseFetch, client)
}

export const expectSettled = async (response: Response) => {
  const text = await response.text()
  const header = response.headers.get("PAYMENT-RESPONSE")
  if (response.status !== 200 || header === null) {
    throw new Error(`paid request answered ${response.status}: ${text.slice(0, 300)}`)
  }
  const receipt = decodePaymentResponseHeader(header)
  if (!receipt.success) throw new Error(`settlement failed: ${receipt.errorReason ?? "?"}`)
}

export type PayFlow = (payFetch: typeof fetch, plainFetch?: typeof fetch) => Promise<void>

/** An open order of the benchmark amount. */
export const createOrder = async (baseUrl: string, plainFetch: typeof fetch = fetch) =>
  expectJson<{ id: string }>(
    await plainFetch(`${baseUrl}/merchant/orders`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ amount: ORDER_AMOUNT_USD, description: "bench" })
    })
  )

/** The service: an order, then its paid request. */
export const servicePayment =
  (baseUrl: string): PayFlow =>
  async (payFetch, plainFetch = fetch) => {
    const order = await createOrder(baseUrl, plainFetch)
    await expectSettled(await payFetch(`${baseUrl}/merchant/orders/${order.id}/pay`, { method: "POST" }))
  }

/** The reference: its paid request. */
export const referencePayment =
  (baseUrl: string): PayFlow =>
  async (payFetch) => {
    await expectSettled(await payFetch(`${baseUrl}/pay`, { method: "POST" }))
  }

export const referenceEnv = (devnet: Devnet, rpcUrl = devnet.rpcUrl) => ({
  CHAIN_RPC_URL: rpcUrl,
  CHAIN_ID: String(devnet.chainId),
  USD1_ADDRESS: devnet.usd1,
  USD1_EIP712_NAME: "World Liberty Financial USD",
  USD1_EIP712_VERSION: "1",
  RELAYER_PRIVATE_KEY: RELAYER_KEY,
  MERCHANT_PAY_TO: MERCHANT,
  PRICE_ATOMIC: ORDER_AMOUNT_ATOMIC.toString()
})

/** Fresh payers holding enough USD1 for every payment they can make. */
export const fundedPayers = (devnet: Devnet, count: number) =>
  Effect.gen(function* () {
    const payers = Array.from({ length: count }, () => privateKeyToAccount(generatePrivateKey()))
    for (const payer of payers) yield* mintUsd1(devnet, payer.address, PAYMENT_CAP_ATOMIC * 10_000n)
    return payers
  })

export const merchantBalance = (devnet: Devnet) =>
  Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).readContract({
      address: devnet.usd1,
      abi: erc20Abi,
      functionName: "balanceOf",
      args: [MERCHANT]
    })
  )

interface PayRun {
  readonly perSecond: number
  readonly p50: number
  readonly max: number
  /** Payments that took a second or more (a receipt poll missed, see docs/performance.md). */
  readonly slow: number
  readonly cpuPerPayment: number
  readonly failures: number
  readonly onChainMatches: boolean
}

type Side = "service" | "reference"

/** One kind of pay run: how many payments, how many at once, whether a warm-up goes first. */
interface PayMode {
  readonly flow: string
  readonly concurrency: number
  readonly payments: number
  readonly warm: boolean
}

const payModes = (ctx: BenchContext): ReadonlyArray<PayMode> => [
  { flow: "x402 pay, concurrency 10", concurrency: 10, payments: ctx.sizes.payments[10], warm: true },
  {
    flow: "x402 pay, concurrency 1 (one payment after another)",
    concurrency: 1,
    payments: ctx.sizes.payments[1],
    warm: true
  },
  {
    flow: `x402 pay right after boot, ${ctx.sizes.bootPayments} payments at concurrency 10 (no warm-up)`,
    concurrency: 10,
    payments: ctx.sizes.bootPayments,
    warm: false
  }
]

const payRun = (ctx: BenchContext, side: Side, { concurrency, payments, warm }: PayMode, runId: string) =>
  Effect.scoped(
    Effect.gen(function* () {
      const devnet = yield* startDevnet()
      const payers = yield* fundedPayers(devnet, concurrency)
      const server: ServerProcess =
        side === "service"
          ? yield* startService(ctx, serviceEnv({ ...ctx, databaseUrl: (yield* runDatabase(ctx)).url }, devnet, runId))
          : yield* startPeer(ctx, "x402Reference", referenceEnv(devnet))
      const flow = side === "service" ? servicePayment(server.baseUrl) : referencePayment(server.baseUrl)
      const fetches = payers.map((payer) => payingFetch(payer, devnet))
      const pay = (worker: number) => flow(fetches[worker]!)

      if (warm) {
        const warmUp = yield* Effect.promise(() => runConcurrently(concurrency, ctx.sizes.warmPayments, pay))
        if (warmUp.latencies.length === 0) {
          return yield* Effect.fail(new Error(`${side} paid nothing: ${warmUp.failureSamples.join("; ")}`))
        }
      }
      const balanceBefore = yield* merchantBalance(devnet)
      const cpuBefore = server.cpuMs()
      const outcome = yield* Effect.promise(() => runConcurrently(concurrency, payments, pay))
      const cpu = server.cpuMs() - cpuBefore
      const received = (yield* merchantBalance(devnet)) - balanceBefore
      const settled = outcome.latencies.length
      if (settled === 0) {
        return yield* Effect.fail(new Error(`${side} paid nothing: ${outcome.failureSamples.join("; ")}`))
      }
      if (outcome.failures > 0) ctx.progress(`  ${side} failures: ${outcome.failureSamples.join(" | ")}`)
      return {
        perSecond: (settled * 1000) / outcome.wallMs,
        p50: percentile(outcome.latencies, 50),
        max: Math.max(...outcome.latencies),
        slow: outcome.latencies.filter((ms) => ms >= 1000).length,
        cpuPerPayment: cpu / settled,
        failures: outcome.failures,
        onChainMatches: receivedMatches(received, settled)
      } satisfies PayRun
    })
  )

export const paySection: Section = {
  name: "pay",
  about: "x402 pay at concurrency 10 and 1, and right after boot: the service against the reference x402 server",
  run: (ctx) =>
    Effect.gen(function* () {
      const rows: Array<RatioRow> = []
      const checks: Array<string> = []
      for (const [index, mode] of payModes(ctx).entries()) {
        const runs: Record<Side, Array<PayRun>> = { service: [], reference: [] }
        for (let round = 0; round < ctx.sizes.rounds; round++) {
          for (const side of alternating<Side>(round, "service", "reference")) {
            const run = yield* payRun(ctx, side, mode, `pay-${index}-${round}`)
            runs[side].push(run)
            ctx.progress(
              `[pay c=${mode.concurrency}${mode.warm ? "" : ", after boot"}] round ${round + 1}/${ctx.sizes.rounds} ${side}: ${run.perSecond.toFixed(1)}/s, ` +
                `p50 ${run.p50.toFixed(0)} ms, max ${run.max.toFixed(0)} ms, ${run.slow} took ≥ 1 s, ` +
                `CPU ${run.cpuPerPayment.toFixed(1)} ms/payment, ${run.failures} failed` +
                (run.onChainMatches ? "" : ", ON-CHAIN MISMATCH")
            )
          }
        }
        const errors = [runs.service, runs.reference].map((list) =>
          list.reduce((sum, run) => sum + run.failures, 0)
        ) as [number, number]
        checks.push(
          [...runs.service, ...runs.reference].every((run) => run.onChainMatches)
            ? `${mode.flow}: in every run the merchant received on chain exactly one amount per settled payment.`
            : `${mode.flow}: ON-CHAIN TRANSFERS DIFFER FROM SETTLED PAYMENTS (see the progress log).`
        )
        const row = (measure: string, better: RatioRow["better"], pick: (run: PayRun) => number) =>
          rows.push({
            measure: `${mode.flow}: ${measure}`,
            better,
            reference: REFERENCE_NAME,
            service: runs.service.map(pick),
            peer: runs.reference.map(pick),
            errors
          })
        row("settled payments/s", "higher", (run) => run.perSecond)
        row("p50 latency, ms", "lower", (run) => run.p50)
        row("server CPU per payment, ms", "lower", (run) => run.cpuPerPayment)
      }
      return { ratios: rows, counts: [], checks }
    })
}
