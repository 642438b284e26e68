/**
 * Transport counts per operation: JSON-RPC calls and SQL statements, seen by counting proxies in
 * front of anvil and PostgreSQL (proxies.ts). A dedicated service instance runs behind both; the
 * reference x402 server behind the JSON-RPC one. Operations run one at a time after a warm-up, and
 * each HTTP response closes a step, so the counts are split per request. The service's background
 * jobs (settlement reconciler, price refresh) are set to an hour here so that nothing else talks
 * during the window; an idle window before the operations shows what still does.
 */
import { Effect } from "effect"
import type { PrivateKeyAccount } from "viem/accounts"
import type { Devnet } from "../src/chain/Devnet.js"
import { type BenchContext, type CountRow, type Section, serviceEnv, startPeer, startService } from "./harness.js"
import { bearerOf } from "./http.js"
import {
  createOrder,
  fundedPayers,
  type PayFlow,
  payingFetch,
  referenceEnv,
  referencePayment,
  servicePayment
} from "./pay.js"
import { type Counter, type Counts, difference, startPgProxy, startRpcProxy, total } from "./proxies.js"
import { freshAccounts, signIn } from "./signin.js"

interface Tally {
  readonly rpc: Map<string, number>
  readonly sql: Map<string, number>
}

/** Attributes what the proxies saw to named steps: each step ends with its HTTP response. */
class Recorder {
  private readonly steps = new Map<string, Tally>()
  private mark: { rpc: Counts; sql: Counts }
  /** While set, every step is booked under this name instead (warm-ups). */
  private override: string | undefined

  constructor(
    private readonly rpc: Counter,
    private readonly sql: Counter | undefined
  ) {
    this.mark = this.now()
  }

  private now() {
    return { rpc: this.rpc.snapshot(), sql: this.sql?.snapshot() ?? new Map<string, number>() }
  }

  /** Everything since the last mark belongs to `step`. */
  close(step: string) {
    const now = this.now()
    const tally = this.steps.get(step) ?? { rpc: new Map(), sql: new Map() }
    for (const [kind, seen] of [
      ["rpc", difference(now.rpc, this.mark.rpc)],
      ["sql", difference(now.sql, this.mark.sql)]
    ] as const) {
      for (const [label, n] of seen) tally[kind].set(label, (tally[kind].get(label) ?? 0) + n)
    }
    this.steps.set(step, tally)
    this.mark = now
  }

  /** A fetch that closes the step `label(request)` when the response arrives. */
  fetch(label: (request: Request) => string): typeof fetch {
    return async (input, init) => {
      const request = new Request(input, init)
      const response = await fetch(request)
      this.close(this.override ?? label(request))
      return response
    }
  }

  /** Runs `warm-up` with every step it closes booked as "warm-up" (not counted), then `measured`. */
  async warmThen(warmUp: () => Promise<unknown>, measured: () => Promise<unknown>) {
    this.override = "warm-up"
    try {
      await warmUp()
      this.close("warm-up")
    } finally {
      this.override = undefined
    }
    await measured()
  }

  tally(step: string): Tally {
    return this.steps.get(step) ?? { rpc: new Map(), sql: new Map() }
  }
}

const amount = (n: number) => (Number.isInteger(n) ? String(n) : n.toFixed(1))

const breakdown = (counts: Counts, ops: number) =>
  [...counts]
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0]))
    .map(([label, n]) => `${label} ${amount(n / ops)}`)
    .join(", ")

const rows = (flow: string, steps: ReadonlyArray<readonly [string, Tally]>, ops: number, withSql: boolean) => {
  const sum = (pick: (tally: Tally) => Counts) => {
    const all = new Map<string, number>()
    for (const [, tally] of steps) for (const [label, n] of pick(tally)) all.set(label, (all.get(label) ?? 0) + n)
    return all
  }
  const row = (name: string, tally: Tally): CountRow => ({
    flow: name,
    rpc: total(tally.rpc) / ops,
    sql: withSql ? total(tally.sql) / ops : undefined,
    detail: [breakdown(tally.rpc, ops), withSql ? breakdown(tally.sql, ops) : ""].filter((s) => s !== "").join("; ")
  })
  return [
    row(flow, { rpc: sum((t) => t.rpc), sql: sum((t) => t.sql) }),
    ...(steps.length > 1 ? steps.map(([step, tally]) => row(`  · ${step}`, tally)) : [])
  ]
}

const payStep = (request: Request) => (request.headers.has("payment-signature") ? "paid request" : "402 request")

const countPayments = (
  recorder: Recorder,
  flow: PayFlow,
  payer: PrivateKeyAccount,
  devnet: Devnet,
  warm: number,
  ops: number
) =>
  Effect.promise(async () => {
    const payFetch = payingFetch(payer, devnet, recorder.fetch(payStep))
    const orderFetch = recorder.fetch(() => "order")
    const pay = async (times: number) => {
      for (let i = 0; i < times; i++) await flow(payFetch, orderFetch)
    }
    await recorder.warmThen(
      () => pay(warm),
      () => pay(ops)
    )
  })

export const countsSection: Section = {
  name: "counts",
  about: "JSON-RPC calls and SQL statements per payment, sign-in, read, GET /me and /health, counted by proxies",
  run: (ctx: BenchContext) =>
    Effect.gen(function* () {
      const ops = ctx.sizes.countedOps
      const devnet = yield* ctx.sharedDevnet
      const rpc = yield* startRpcProxy(devnet.rpcUrl)
      const pg = yield* startPgProxy(ctx.databaseUrl)
      const proxied = { ...devnet, rpcUrl: rpc.url }
      const service = yield* startService(
        ctx,
        serviceEnv(ctx, proxied, "counts", {
          DATABASE_URL: pg.url,
          RECONCILE_INTERVAL: "1 hour",
          PRICE_REFRESH_INTERVAL: "1 hour"
        })
      )
      const [servicePayer, referencePayer] = yield* fundedPayers(devnet, 2)
      const recorder = new Recorder(rpc.counter, pg.counter)

      yield* Effect.sleep("1 second")
      recorder.close("start-up")
      yield* Effect.sleep("1 second")
      recorder.close("idle")
      const idle = recorder.tally("idle")
      const idleCalls = total(idle.rpc) + total(idle.sql)
      if (idleCalls > 0) {
        ctx.progress(`[counts] background traffic in 1 s idle: ${breakdown(idle.rpc, 1)} ${breakdown(idle.sql, 1)}`)
      }

      yield* countPayments(recorder, servicePayment(service.baseUrl), servicePayer!, devnet, 2, ops)
      const servicePay = (["order", "402 request", "paid request"] as const).map(
        (step) => [step, recorder.tally(step)] as const
      )

      const accounts = freshAccounts(ops + 1)
      const countingPost = (url: string, body: unknown) =>
        recorder.fetch(() => (url.endsWith("/challenge") ? "challenge" : "verify"))(url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(body)
        })
      yield* Effect.promise(() =>
        recorder.warmThen(
          () => signIn(service.baseUrl, accounts[0]!, countingPost),
          async () => {
            for (const account of accounts.slice(1)) await signIn(service.baseUrl, account, countingPost)
          }
        )
      )
      const signInSteps = (["challenge", "verify"] as const).map((step) => [step, recorder.tally(step)] as const)

      yield* Effect.promise(async () => {
        const read = recorder.fetch(() => "read")
        const me = recorder.fetch(() => "me")
        const health = recorder.fetch(() => "health")
        let order = ""
        let token = ""
        const readMeAndHealth = async (times: number) => {
          for (let i = 0; i < times; i++) {
            await (await read(`${service.baseUrl}/merchant/orders/${order}`)).arrayBuffer()
            await (await me(`${service.baseUrl}/me`, { headers: { authorization: `Bearer ${token}` } })).arrayBuffer()
            await (await health(`${service.baseUrl}/health`)).arrayBuffer()
          }
        }
        await recorder.warmThen(
          async () => {
            order = (await createOrder(service.baseUrl)).id
            token = await bearerOf(service.baseUrl)
            await readMeAndHealth(1)
          },
          () => readMeAndHealth(ops)
        )
      })

      const reference = yield* startPeer(ctx, "x402Reference", referenceEnv(devnet, rpc.url))
      const referenceRecorder = new Recorder(rpc.counter, undefined)
      yield* countPayments(referenceRecorder, referencePayment(reference.baseUrl), referencePayer!, devnet, 2, ops)
      const referencePay = (["402 request", "paid request"] as const).map(
        (step) => [step, referenceRecorder.tally(step)] as const
      )

      const counts: Array<CountRow> = [
        ...rows("x402 pay, service: order + 402 + paid request", servicePay, ops, true),
        ...rows("x402 pay, reference x402 server: 402 + paid request", referencePay, ops, false),
        ...rows("sign-in, service: challenge + verify", signInSteps, ops, true),
        ...rows("read one order, service", [["read", recorder.tally("read")]], ops, true),
        ...rows("GET /me, service (a user without a card)", [["me", recorder.tally("me")]], ops, true),
        ...rows("GET /health, service", [["health", recorder.tally("health")]], ops, true)
      ]
      if (idleCalls > 0) {
        counts.push({ flow: "idle service, 1 s (background)", rpc: total(idle.rpc), sql: total(idle.sql), detail: "" })
      }
      const statements = (steps: ReadonlyArray<string>) =>
        amount(steps.reduce((sum, step) => sum + total(recorder.tally(step).sql), 0) / ops)
      // Printed under the ratio table, beside the ratios they explain.
      const checks = [
        `SQL statements per operation (counted by the proxy): read one order ${statements(["read"])}, ` +
          `GET /me ${statements(["me"])}, sign-in ${statements(["challenge", "verify"])} ` +
          `(challenge ${statements(["challenge"])}, verify ${statements(["verify"])}), ` +
          `create order ${statements(["order"])}, x402 pay ${statements(["402 request", "paid request"])} ` +
          `(402 ${statements(["402 request"])}, paid request ${statements(["paid request"])}), /health ${statements(["health"])}.`
      ]
      return { ratios: [], counts, checks }
    })
}
