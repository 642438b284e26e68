/**
 * The reliability suite (`npm run test:reliability`, not part of `npm test`): the service attacked
 * as an adversary would. Each scenario asserts its invariants and records its figures; the figures
 * are printed as one table at the end.
 */
import { HttpServer } from "@effect/platform"
import { afterAll, describe, expect, it, layer } from "@effect/vitest"
import { Duration, Effect, Fiber } from "effect"
import { createPublicClient, type Hex, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS, startDevnet } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { startService, stopService } from "../support/process.js"
import { startRpcProxy } from "../support/RpcProxy.js"
import { startTcpProxy } from "../support/TcpProxy.js"
import { devnetRpc as rpc } from "../support/TestChain.js"
import { queryDatabase as query, temporaryDatabaseUrl } from "../support/TestDatabase.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import type { Offer } from "../support/x402.js"
import { record, table } from "./figures.js"
import { fuzz, HANG_LIMIT_MS, samples } from "./fuzzRun.js"
import {
  type Answer,
  type Attempt,
  audit,
  awaitSettled,
  call,
  contractBreaches,
  createOrders,
  killBackends,
  payers,
  payOnce,
  serviceEnv,
  statuses
} from "./services.js"

/**
 * Four lanes of reads, each read again as soon as it is answered, until `stop`: the answers in
 * `reads`, for the test to check every one was a coded, bounded answer.
 */
const readsMeanwhile = (read: (lane: number) => Effect.Effect<Answer>) =>
  Effect.gen(function* () {
    const reads: Array<Answer> = []
    let loading = true
    const reader = yield* Effect.fork(
      Effect.forEach(
        [0, 1, 2, 3],
        (lane) =>
          Effect.whileLoop({
            while: () => loading,
            body: () => read(lane),
            step: (answer) => {
              reads.push(answer)
            }
          }),
        { concurrency: 4, discard: true }
      )
    )
    const stop = Effect.suspend(() => {
      loading = false
      return Fiber.join(reader)
    })
    return { reads, stop }
  })

/** The fuzz run's size (the issue asks for at least 5,000) and its seed (a run is reproducible). */
const FUZZ_REQUESTS = 5_200
const FUZZ_SEED = 20_261_122

afterAll(() => {
  console.log(`\nreliability figures\n${table()}\n`)
})

describe("reliability", () => {
  layer(
    testServer(
      { MERCHANT_PAY_TO: privateKeyToAccount(generatePrivateKey()).address, AGENT_MODE: "dry" },
      { chain: InMemoryChain.layer() }
    ),
    { excludeTestServices: true }
  )("fuzzing every operation of /openapi.json, and the parser", (it) => {
    it.effect(
      "no 5xx, every error body {error, code}, no hang",
      () =>
        Effect.gen(function* () {
          const server = yield* HttpServer.HttpServer
          const port = server.address._tag === "TcpAddress" ? server.address.port : 0
          const started = Date.now()
          const tally = yield* fuzz(port, FUZZ_REQUESTS, FUZZ_SEED)
          record("fuzz: operations", tally.operations)
          record("fuzz: requests", tally.requests)
          record("fuzz: 5xx", tally.serverErrors.length)
          record("fuzz: non-conforming error bodies", tally.nonConforming.length)
          record(`fuzz: hangs (no answer in ${HANG_LIMIT_MS / 1000} s)`, tally.hangs.length)
          record("fuzz: connections cut without an answer", tally.unanswered.length)
          record(
            "fuzz: statuses",
            [...tally.byStatus]
              .sort(([a], [b]) => a - b)
              .map(([status, n]) => `${status}:${n}`)
              .join(" ")
          )
          record("fuzz: duration", `${((Date.now() - started) / 1000).toFixed(1)} s`)
          expect(tally.requests).toBeGreaterThanOrEqual(5_000)
          expect(tally.serverErrors, samples(tally.serverErrors)).toEqual([])
          expect(tally.nonConforming, samples(tally.nonConforming)).toEqual([])
          expect(tally.hangs, samples(tally.hangs)).toEqual([])
          expect(tally.unanswered, samples(tally.unanswered)).toEqual([])
        }),
      300_000
    )
  })

  /** The audit's invariants, recorded under `scenario`. */
  const expectHonest = (scenario: string, outcome: Effect.Effect.Success<ReturnType<typeof audit>>) => {
    record(`${scenario}: orders paid / open`, `${outcome.paidOrders} / ${outcome.openOrders}`)
    record(`${scenario}: transfers on chain`, outcome.transfers)
    record(`${scenario}: answered failed, later paid`, outcome.failedButPaid.length)
    record(`${scenario}: answered paid, not paid`, outcome.paidButNot.length)
    expect(outcome.inconsistent).toEqual([])
    expect(outcome.transfers).toBe(outcome.paidOrders)
    expect(outcome.failedButPaid).toEqual([])
    expect(outcome.paidButNot).toEqual([])
  }

  const expectCoded = (scenario: string, answers: ReadonlyArray<Answer>) => {
    const breaches = contractBreaches(answers)
    record(`${scenario}: 500s, unanswered or uncoded errors`, breaches.length)
    expect(breaches.map((answer) => `${answer.status} ${JSON.stringify(answer.body)?.slice(0, 200)}`)).toEqual([])
  }

  const slowest = (answers: ReadonlyArray<Answer>) => `${Math.max(0, ...answers.map((answer) => answer.ms))} ms`

  it.live(
    "database backends terminated under a pay and read load: nothing lost or duplicated, no lie",
    () =>
      Effect.gen(function* () {
        const devnet = yield* startDevnet().pipe(Effect.orDie)
        const databaseUrl = yield* temporaryDatabaseUrl
        const merchant = privateKeyToAccount(generatePrivateKey()).address
        const chain = { rpcUrl: devnet.rpcUrl, devnet }
        const env = yield* serviceEnv(chain, databaseUrl, merchant, 9)
        // Behind one public URL, as replicas are: a payment names the order's URL there.
        const replicas = yield* Effect.all(
          [
            startService(env),
            startService({ ...(yield* serviceEnv(chain, databaseUrl, merchant, 0)), API_URL: env.API_URL })
          ],
          { concurrency: 2 }
        )
        const replica = (i: number) => replicas[i % 2]!
        const orders = yield* createOrders(replicas[0]!, 24)

        const { reads, stop: stopReads } = yield* readsMeanwhile((lane) =>
          call(replica(lane), "GET", `/merchant/orders/${orders[lane]!.id}`)
        )
        // Three payers race for every order, spread over the window in which backends are killed.
        const paying = yield* Effect.fork(
          Effect.forEach(
            orders,
            (order, i) =>
              Effect.sleep(Duration.millis(i * 200)).pipe(
                Effect.zipRight(
                  Effect.all(
                    [0, 1, 2].map((k) => payOnce(replica(i + k), order, payers[(i + k) % payers.length]!)),
                    { concurrency: 3 }
                  )
                )
              ),
            { concurrency: "unbounded" }
          )
        )
        let killed = 0
        for (let round = 0; round < 10; round++) {
          yield* Effect.sleep("500 millis")
          killed += yield* killBackends(databaseUrl)
        }
        const lastKill = Date.now()
        // Recovery: until both replicas read an order again.
        yield* Effect.forEach(
          replicas,
          (service) =>
            eventually(
              `${service.baseUrl} to read an order again`,
              call(service, "GET", `/merchant/orders/${orders[0]!.id}`),
              (answer) => answer.status === 200,
              { every: "50 millis" }
            ),
          { concurrency: 2 }
        )
        const recoveryMs = Date.now() - lastKill
        const attempts = (yield* Fiber.join(paying)).flat()
        yield* stopReads
        yield* awaitSettled(databaseUrl)
        const outcome = yield* audit(devnet, databaseUrl, merchant, orders, attempts)

        record("db kills: backends terminated (2 replicas)", killed)
        record("db kills: pay attempts", attempts.length)
        record("db kills: pay statuses", statuses(attempts.map((attempt) => attempt.answer)))
        record("db kills: reads", reads.length)
        record("db kills: read statuses", statuses(reads))
        record("db kills: slowest answer", slowest([...reads, ...attempts.map((attempt) => attempt.answer)]))
        record("db kills: recovery after the last kill", `${recoveryMs} ms`)
        expectCoded("db kills", [...reads, ...attempts.map((attempt) => attempt.answer)])
        expectHonest("db kills", outcome)
        expect(killed).toBeGreaterThan(0)
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "the chain stalled: coded 503s within the chain timeout, consistent orders once it resumes",
    () =>
      Effect.gen(function* () {
        const devnet = yield* startDevnet().pipe(Effect.orDie)
        const anvil = new URL(devnet.rpcUrl)
        const proxy = yield* startTcpProxy({ host: anvil.hostname, port: Number(anvil.port) })
        const databaseUrl = yield* temporaryDatabaseUrl
        const merchant = privateKeyToAccount(generatePrivateKey()).address
        const service = yield* startService(
          yield* serviceEnv({ rpcUrl: proxy.url(devnet.rpcUrl), devnet }, databaseUrl, merchant)
        )
        const orders = yield* createOrders(service, 16)
        // Payments keep coming while the chain stops answering for 12 s.
        const paying = yield* Effect.fork(
          Effect.forEach(
            orders,
            (order, i) =>
              Effect.sleep(Duration.millis(i * 400)).pipe(Effect.zipRight(payOnce(service, order, payers[i % 8]!))),
            { concurrency: "unbounded" }
          )
        )
        yield* Effect.sleep("1 second")
        proxy.setMode("stall")
        const ready = yield* call(service, "GET", "/ready")
        yield* Effect.sleep("11 seconds")
        proxy.setMode("forward")
        const resumedAt = Date.now()
        const attempts = yield* Fiber.join(paying)
        yield* awaitSettled(databaseUrl)
        const settledMs = Date.now() - resumedAt
        const duringStall = attempts.filter((attempt) => attempt.answer.status === 503)
        // The orders left open are paid now that the chain answers.
        const open = yield* query(databaseUrl, "SELECT id FROM orders WHERE status = 'open'")
        const retried = yield* Effect.forEach(
          orders.filter((order) => open.some((row) => row.id === order.id)),
          (order, i) => payOnce(service, order, payers[(i + 3) % 8]!),
          { concurrency: 4 }
        )
        yield* awaitSettled(databaseUrl)
        const all: ReadonlyArray<Attempt> = [...attempts, ...retried]
        const outcome = yield* audit(devnet, databaseUrl, merchant, orders, all)

        record("chain stall: pay attempts (stalled 11 s)", attempts.length)
        record("chain stall: pay statuses", statuses(attempts.map((attempt) => attempt.answer)))
        record("chain stall: slowest answer", slowest(attempts.map((attempt) => attempt.answer)))
        record("chain stall: /ready while stalled", `${ready.status} ${ready.body?.error ?? ""}`)
        record("chain stall: resumed to every settlement final", `${settledMs} ms`)
        record("chain stall: retried open orders, statuses", statuses(retried.map((attempt) => attempt.answer)))
        expect(ready.status).toBe(503)
        expect(ready.body.error).toContain("chain not answering")
        expect(duringStall.length).toBeGreaterThan(0)
        for (const attempt of duringStall) expect(attempt.answer.body.code).toBe("CHAIN_UNAVAILABLE")
        for (const attempt of retried) expect(attempt.answer.status).toBe(200)
        expectCoded(
          "chain stall",
          all.map((attempt) => attempt.answer)
        )
        expectHonest("chain stall", outcome)
        expect(outcome.openOrders).toBe(0)
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "endpoint loss: the first of two RPC endpoints killed, then hung, under payments and reads: no request fails",
    () =>
      Effect.gen(function* () {
        const devnet = yield* startDevnet().pipe(Effect.orDie)
        const endpoints = [yield* startRpcProxy(devnet.rpcUrl), yield* startRpcProxy(devnet.rpcUrl)] as const
        const [first] = endpoints
        const databaseUrl = yield* temporaryDatabaseUrl
        const merchant = privateKeyToAccount(generatePrivateKey()).address
        const env = yield* serviceEnv(
          { rpcUrl: endpoints.map((endpoint) => endpoint.url).join(","), devnet },
          databaseUrl,
          merchant
        )
        const service = yield* startService({ ...env, CHAIN_RPC_PROBE_INTERVAL: "250 millis" })
        const orders = yield* createOrders(service, 24)
        const metric = (text: string, series: string) =>
          Number(
            text
              .split("\n")
              .find((line) => line.startsWith(`${series} `))
              ?.split(" ")[1] ?? Number.NaN
          )
        const endpointOne = (text: string, name: string, extra = "") =>
          metric(text, `${name}{endpoint="1",host="${new URL(first.url).host}"${extra}}`)
        const firstState = Effect.map(
          call(service, "GET", "/ready"),
          (answer) => (answer.body?.chainEndpoints as ReadonlyArray<{ readonly state: string }> | undefined)?.[0]?.state
        )

        const { reads, stop: stopReads } = yield* readsMeanwhile((lane) =>
          lane === 3 ? call(service, "GET", "/ready") : call(service, "GET", `/merchant/orders/${orders[lane]!.id}`)
        )
        // A payment every 250 ms over both faults.
        const paying = yield* Effect.fork(
          Effect.forEach(
            orders,
            (order, i) =>
              Effect.sleep(Duration.millis(i * 250)).pipe(Effect.zipRight(payOnce(service, order, payers[i % 8]!))),
            { concurrency: "unbounded" }
          )
        )
        yield* Effect.sleep("1 second")
        yield* first.kill
        const killedAt = Date.now()
        yield* eventually("endpoint 1 down", firstState, (state) => state === "down", { every: "20 millis" })
        const seenDownMs = Date.now() - killedAt
        yield* Effect.sleep("2 seconds")
        yield* first.revive
        const revivedAt = Date.now()
        yield* eventually("endpoint 1 up again", firstState, (state) => state === "up", { every: "20 millis" })
        const backMs = Date.now() - revivedAt
        const usedBefore = endpointOne(
          String((yield* call(service, "GET", "/metrics")).body),
          "chain_rpc_requests_total",
          ',outcome="answered"'
        )
        yield* Effect.sleep("1 second")
        first.stall()
        yield* Effect.sleep("2 seconds")
        first.forward()
        const attempts = yield* Fiber.join(paying)
        yield* stopReads
        yield* awaitSettled(databaseUrl)
        const outcome = yield* audit(devnet, databaseUrl, merchant, orders, attempts)
        yield* eventually("endpoint 1 up after the hang", firstState, (state) => state === "up")
        const metrics = String((yield* call(service, "GET", "/metrics")).body)

        const answers = [...reads, ...attempts.map((attempt) => attempt.answer)]
        record("endpoint loss: pay attempts (killed 2 s, then hung 2 s)", attempts.length)
        record("endpoint loss: pay statuses", statuses(attempts.map((attempt) => attempt.answer)))
        record("endpoint loss: reads (orders, /ready)", reads.length)
        record("endpoint loss: read statuses", statuses(reads))
        record("endpoint loss: slowest answer", slowest(answers))
        record("endpoint loss: kill to endpoint 1 shown down", `${seenDownMs} ms`)
        record("endpoint loss: back to endpoint 1 shown up", `${backMs} ms`)
        record(
          "endpoint loss: reads failed over (chain_rpc_failovers_total)",
          metric(metrics, "chain_rpc_failovers_total")
        )
        record(
          "endpoint loss: endpoint 1 calls unreachable / answered after it came back",
          `${endpointOne(metrics, "chain_rpc_requests_total", ',outcome="unreachable"')} / ${
            endpointOne(metrics, "chain_rpc_requests_total", ',outcome="answered"') - usedBefore
          }`
        )
        // No request fails: every read 200; every payment 200, or 202 when its settlement outlasted
        // SETTLEMENT_WAIT on a loaded machine (the audit below then finds it paid once).
        expect(reads.filter((answer) => answer.status !== 200).map((answer) => answer.status)).toEqual([])
        expect(attempts.filter((attempt) => attempt.answer.status !== 200 && attempt.answer.status !== 202)).toEqual([])
        expectCoded("endpoint loss", answers)
        expectHonest("endpoint loss", outcome)
        expect(outcome.openOrders).toBe(0)
        expect(endpointOne(metrics, "chain_rpc_endpoint_up")).toBe(1)
        expect(endpointOne(metrics, "chain_rpc_requests_total", ',outcome="answered"')).toBeGreaterThan(usedBefore)
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "SIGKILL mid-settlement and restart: every order paid once or open, transfers equal paid orders",
    () =>
      Effect.gen(function* () {
        const devnet = yield* startDevnet().pipe(Effect.orDie)
        const databaseUrl = yield* temporaryDatabaseUrl
        const merchant = privateKeyToAccount(generatePrivateKey()).address
        const env = yield* serviceEnv({ rpcUrl: devnet.rpcUrl, devnet }, databaseUrl, merchant)
        const first = yield* startService(env)
        const orders = yield* createOrders(first, 16)
        // A block a second: settlements wait for their receipts, so the kill finds them in flight.
        yield* rpc(devnet, "evm_setIntervalMining", [1])
        const paying = yield* Effect.fork(
          Effect.forEach(orders, (order, i) => payOnce(first, order, payers[i % 8]!), { concurrency: "unbounded" })
        )
        const inFlight = yield* eventually(
          "4 settlements in flight",
          query(databaseUrl, "SELECT count(*)::int AS n FROM settlements WHERE status = 'broadcast'").pipe(
            Effect.map((rows) => rows[0]!.n as number)
          ),
          (n) => n >= 4,
          { every: "20 millis" }
        )
        expect(yield* stopService(first, "SIGKILL")).toBe(null)
        const killedAt = Date.now()
        const attempts = yield* Fiber.join(paying)
        const second = yield* startService(env)
        const restartMs = Date.now() - killedAt
        yield* awaitSettled(databaseUrl)
        const takeoverMs = Date.now() - killedAt
        const outcome = yield* audit(devnet, databaseUrl, merchant, orders, attempts)
        yield* stopService(second, "SIGTERM")

        record("SIGKILL: settlements broadcast, unconfirmed at the kill", inFlight)
        record("SIGKILL: restart", `${restartMs} ms`)
        record("SIGKILL: kill to every settlement final", `${takeoverMs} ms`)
        expectHonest("SIGKILL", outcome)
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "the gas drain: a payer funded for one order pays ten at once, twice: one broadcast, none reverted",
    () =>
      Effect.gen(function* () {
        const devnet = yield* startDevnet().pipe(Effect.orDie)
        const databaseUrl = yield* temporaryDatabaseUrl
        const merchant = privateKeyToAccount(generatePrivateKey()).address
        const service = yield* startService(yield* serviceEnv({ rpcUrl: devnet.rpcUrl, devnet }, databaseUrl, merchant))
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const relayer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
        const relayerState = Effect.promise(async () => ({
          ether: await client.getBalance({ address: relayer }),
          sent: await client.getTransactionCount({ address: relayer, blockTag: "pending" })
        }))
        // Ten orders of 0.000001 USD1 (each with its own value below a micro-dollar); the attacker
        // holds one order's worth: the most any of them asks, less than any two ask.
        const amount = "0.000001"
        const attacker = privateKeyToAccount(generatePrivateKey())
        const orders = yield* Effect.forEach(
          Array.from({ length: 10 }),
          () =>
            Effect.gen(function* () {
              const created = yield* call(service, "POST", "/merchant/orders", {
                json: { amount, description: "drain" }
              })
              const offer: Offer = (yield* call(service, "GET", `/merchant/orders/${created.body.id}/pay`)).body
              return { id: created.body.id as string, amount: BigInt(offer.accepts[0]!.amount), offer }
            }),
          { concurrency: 4 }
        )
        const [oneOrder] = orders.map((order) => order.amount).sort((a, b) => Number(b - a))
        yield* mintUsd1(devnet, attacker.address, oneOrder!).pipe(Effect.orDie)
        const before = yield* relayerState
        const round = (open: ReadonlyArray<(typeof orders)[number]>) =>
          Effect.forEach(open, (order) => payOnce(service, order, attacker), { concurrency: "unbounded" })

        const started = Date.now()
        const first = yield* round(orders)
        const firstMs = Date.now() - started
        const afterFirst = yield* relayerState
        // The attacker repeats on the orders still open.
        const reopened = yield* query(databaseUrl, "SELECT id FROM orders WHERE status = 'open'")
        const second = yield* round(orders.filter((order) => reopened.some((row) => row.id === order.id)))
        yield* awaitSettled(databaseUrl)
        const after = yield* relayerState
        const paid = first.filter((attempt) => attempt.answer.status === 200)
        const receipt = yield* Effect.promise(() =>
          client.getTransactionReceipt({ hash: paid[0]!.answer.body.tx as Hex })
        )
        const oneTransfer = receipt.gasUsed * receipt.effectiveGasPrice
        const reverted = yield* query(
          databaseUrl,
          "SELECT count(*)::int AS n FROM settlements WHERE error_reason = 'invalid_exact_evm_transaction_failed'"
        )
        const orderStatuses = yield* query(databaseUrl, "SELECT status, count(*)::int AS n FROM orders GROUP BY status")
        const metrics = yield* call(service, "GET", "/metrics")
        const revertedMetric = String(metrics.body)
          .split("\n")
          .find((line) => line.startsWith("merchant_settlements_reverted_total "))

        record("gas drain: round 1 (10 at once), statuses", statuses(first.map((attempt) => attempt.answer)))
        record("gas drain: round 1 duration", `${firstMs} ms`)
        record("gas drain: round 2 (the 9 open again), statuses", statuses(second.map((attempt) => attempt.answer)))
        record("gas drain: relayer transactions (both rounds)", after.sent - before.sent)
        record("gas drain: settlements reverted on chain", reverted[0]!.n as number)
        record("gas drain: merchant_settlements_reverted_total", revertedMetric?.split(" ")[1] ?? "0")
        record(
          "gas drain: orders by status",
          orderStatuses
            .map((row) => `${row.status}:${row.n}`)
            .sort()
            .join(" ")
        )
        record("gas drain: relayer gas spent / one transfer's (wei)", `${before.ether - after.ether} / ${oneTransfer}`)
        expect(first.map((attempt) => attempt.answer.status).sort()).toEqual([200, ...Array(9).fill(402)])
        expect(second.map((attempt) => attempt.answer.status)).toEqual(Array(9).fill(402))
        expectCoded(
          "gas drain",
          [...first, ...second].map((attempt) => attempt.answer)
        )
        expect(afterFirst.sent - before.sent).toBe(1)
        expect(after.sent - before.sent).toBe(1)
        expect(receipt.status).toBe("success")
        expect(before.ether - after.ether).toBe(oneTransfer)
        expect(reverted[0]!.n).toBe(0)
        expect(revertedMetric).toBeUndefined()
        expect(orderStatuses.find((row) => row.status === "open")?.n).toBe(9)
      }).pipe(Effect.scoped),
    300_000
  )
})
