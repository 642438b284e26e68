/**
 * Dependencies that fail under the service, on the real service (as `npm start` runs it) under a
 * request load: the embedded PostgreSQL and the embedded devnet SIGKILLed (restarted, served again,
 * the service itself never restarted), a devnet that cannot be restarted (the service exits 1 with
 * one fatal line), and a 20 s database outage (a bounded number of log lines, no stack trace per
 * request). Each records its figures; they are printed as one table at the end.
 */
import { existsSync, readFileSync, statSync } from "node:fs"
import { createServer } from "node:net"
import path from "node:path"
import { afterAll, describe, expect, it } from "@effect/vitest"
import { Effect, Fiber, Ref, Schedule } from "effect"
import { createPublicClient, erc20Abi, type Hex, http, parseAbiItem, parseGwei } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { DEVNET_RELAYER_KEY } from "../../src/chain/Deployment.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { isAlive } from "../../src/embedded/EmbeddedServer.js"
import {
  type Answer,
  callService,
  logLines,
  processesMentioning,
  type ServiceProcess,
  startService,
  temporaryDirectory
} from "../support/process.js"
import { startTcpProxy } from "../support/TcpProxy.js"
import { temporaryDatabaseUrl } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"
import { expectWorth, type Offer, signPayment } from "../support/x402.js"
import { record, table } from "./figures.js"
import { contractBreaches, payers, statuses } from "./services.js"

afterAll(() => {
  console.log(`\ndependency figures\n${table()}\n`)
})

/** An answer and when it came (ms since epoch). */
interface Timed extends Answer {
  readonly at: number
}

/**
 * Runs `lanes` request loops against the service until `stop`; answers every answer in order.
 * Each lane calls its request with an increasing counter.
 */
const load = (lanes: ReadonlyArray<(i: number) => Effect.Effect<Answer>>) =>
  Effect.gen(function* () {
    const running = yield* Ref.make(true)
    const answers = yield* Ref.make<ReadonlyArray<Timed>>([])
    const fiber = yield* Effect.fork(
      Effect.forEach(
        lanes,
        (request) =>
          Effect.iterate(0, {
            while: () => Effect.runSync(Ref.get(running)),
            body: (i) =>
              request(i).pipe(
                Effect.flatMap((answer) => Ref.update(answers, (all) => [...all, { ...answer, at: Date.now() }])),
                // a lane that is refused fast must not spin
                Effect.zipRight(Effect.sleep("20 millis")),
                Effect.as(i + 1)
              )
          }),
        { concurrency: "unbounded", discard: true }
      )
    )
    return {
      answers: Ref.get(answers),
      stop: Ref.set(running, false).pipe(Effect.zipRight(Fiber.join(fiber)), Effect.zipRight(Ref.get(answers)))
    }
  })

/** Waits until `observe` sees something (test/support/wait.ts); a failed wait shows the service's last output. */
const awaitSeen = <A>(what: string, service: ServiceProcess, observe: Effect.Effect<A | undefined>) =>
  eventually(what, observe, (seen) => seen !== undefined, { explain: () => service.output().slice(-4000) }).pipe(
    Effect.map((seen) => seen as A)
  )

type LogLine = Record<string, unknown> & {
  readonly message: string
  readonly logLevel: string
  readonly timestamp: string
}

/** The service's log lines; a message logged with its cause (an array) read as one text. */
const lines = (service: ServiceProcess) =>
  logLines(service.output()).map((line) => ({
    ...line,
    message: Array.isArray(line.message) ? line.message.map(String).join(" ") : String(line.message)
  })) as unknown as ReadonlyArray<LogLine>

/** Per-request lines: the access log's, and the orders' own ("order created", "order paid"). */
const perRequest = (line: LogLine) =>
  line.message === "Sent HTTP response" || /^order (created|paid)$/.test(line.message)

/** Lines other than per-request ones, written at or after `since` (ms). */
const eventsSince = (service: ServiceProcess, since: number) =>
  lines(service).filter((line) => !perRequest(line) && Date.parse(line.timestamp) >= since)

/** The first line whose message starts with `prefix`, once written. */
const lineStarting = (service: ServiceProcess, prefix: string) =>
  Effect.sync(() => lines(service).find((line) => line.message.startsWith(prefix)))

/** The pid on a pid file's first line (PostgreSQL's postmaster.pid, the devnet's anvil.pid). */
const pidIn = (file: string) => Number(readFileSync(file, "utf8").split("\n")[0])

/** The supervisor's "<server> restarted after N s" line (or the service's exit, which fails the match). */
const awaitRestarted = (service: ServiceProcess, server: "PostgreSQL" | "anvil") =>
  Effect.gen(function* () {
    const restarted = yield* awaitSeen(
      `${server} is restarted (or the service exited)`,
      service,
      Effect.map(
        lineStarting(service, `${server} restarted`),
        (line) => line ?? (service.child.exitCode !== null ? ({ message: "exited" } as LogLine) : undefined)
      )
    )
    expect(restarted.message).toMatch(new RegExp(`^${server} restarted after \\d+\\.\\d s$`))
    return restarted
  })

/** A payment answered 200 `paid`. */
const isPaid = (answer: Answer) => answer.status === 200 && answer.body?.status === "paid"

/** How many payments the load has seen answered `paid` so far. */
const paidSoFar = (answers: Effect.Effect<ReadonlyArray<Timed>>) =>
  Effect.map(answers, (all) => all.filter(isPaid).length)

/** When the first payment answered 200 `paid` after `since` came. */
const awaitPaidAfter = (service: ServiceProcess, answers: Effect.Effect<ReadonlyArray<Timed>>, since: number) =>
  awaitSeen(
    "a payment is settled again",
    service,
    Effect.map(answers, (all) => all.find((answer) => answer.at > since && isPaid(answer))?.at)
  )

/** The embedded devnet's RPC URL and USD1, from its start-up line. */
const devnetOf = (service: ServiceProcess) => {
  const ready = lines(service).find((line) => line.message.startsWith("devnet ready at "))
  const annotations = ready?.annotations as { readonly rpcUrl: string; readonly usd1: Hex } | undefined
  if (annotations === undefined) throw new Error("no devnet start-up line")
  return annotations
}

/** USD1 transfers to `to` on the service's embedded devnet. */
const transfersTo = (service: ServiceProcess, to: Hex) => {
  const devnet = devnetOf(service)
  return Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).getLogs({
      address: devnet.usd1,
      event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
      args: { to },
      fromBlock: 0n
    })
  )
}

/** A service on embedded defaults (its own PostgreSQL and devnet under a fresh DATA_DIR). */
const embeddedService = (extra: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const dataDir = yield* temporaryDirectory("card-service-deps-")
    const port = String(yield* freePort)
    const merchant = privateKeyToAccount(generatePrivateKey()).address
    const service = yield* startService({
      PORT: port,
      API_URL: `http://127.0.0.1:${port}`,
      DATA_DIR: dataDir,
      MERCHANT_PAY_TO: merchant,
      RATE_LIMIT_ORDERS: "1000000",
      RATE_LIMIT_SIGNIN: "1000000",
      LOG_LEVEL: "Info",
      ...extra
    })
    return { service, dataDir, merchant }
  })

const createOrder = (service: ServiceProcess, amount = "1.25") =>
  callService(service, "POST", "/merchant/orders", { json: { amount, description: "dependency test" } })

/** Creates an order and pays it with `payer`'s signature: the pay answer (or the order's refusal). */
const orderAndPay = (service: ServiceProcess, payer: (typeof payers)[number]) =>
  Effect.gen(function* () {
    const created = yield* createOrder(service)
    if (created.status !== 200) return created
    const offer = yield* callService(service, "GET", `/merchant/orders/${created.body.id}/pay`)
    if (offer.body?.accepts?.[0] === undefined) return offer
    const signed = yield* Effect.promise(() => signPayment(payer, offer.body as Offer))
    return yield* callService(service, "POST", `/merchant/orders/${created.body.id}/pay`, {
      headers: { "payment-signature": signed.header }
    })
  })

const ms = (value: number) => `${Math.round(value)} ms`

/** A payment stream's step: creates an order, keeps it for the audit (`orders`), and pays it. */
const auditedPayments = (service: ServiceProcess) =>
  Effect.gen(function* () {
    const orders = yield* Ref.make<ReadonlyArray<string>>([])
    const payOne = (payer: (typeof payers)[number]) =>
      Effect.gen(function* () {
        const created = yield* createOrder(service)
        if (created.status !== 200) return created
        yield* Ref.update(orders, (all) => [...all, created.body.id as string])
        const offer = yield* callService(service, "GET", `/merchant/orders/${created.body.id}/pay`)
        if (offer.body?.accepts?.[0] === undefined) return offer
        const signed = yield* Effect.promise(() => signPayment(payer, offer.body as Offer))
        return yield* callService(service, "POST", `/merchant/orders/${created.body.id}/pay`, {
          headers: { "payment-signature": signed.header }
        })
      })
    return { orders: Ref.get(orders), payOne }
  })

/**
 * Once every order is decided (none left settling): the paid orders, how many are not paid, the
 * USD1 transfers to the merchant on chain and the merchant's balance, the three sources to compare.
 */
const auditPayments = (service: ServiceProcess, merchant: Hex, ids: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    const final = yield* eventually(
      "every order to be decided",
      Effect.forEach(ids, (id) => callService(service, "GET", `/merchant/orders/${id}`), { concurrency: 4 }),
      (all) => all.every((answer) => answer.body?.status !== "settling"),
      { atMost: "90 seconds" }
    )
    const devnet = devnetOf(service)
    const balance = yield* Effect.promise(() =>
      createPublicClient({ transport: http(devnet.rpcUrl) }).readContract({
        address: devnet.usd1,
        abi: erc20Abi,
        functionName: "balanceOf",
        args: [merchant]
      })
    )
    return {
      paidOrders: final.filter((answer) => answer.body?.status === "paid").map((answer) => answer.body),
      unpaid: final.filter((answer) => answer.body?.status !== "paid").length,
      transfers: yield* transfersTo(service, merchant),
      balance
    }
  })

/**
 * The three sources agree: each paid order is its own transfer on chain, of 1.25 USD1 (and the order's
 * own value below a micro-dollar), and the merchant holds what they transferred.
 */
const expectSourcesAgree = ({
  paidOrders,
  transfers,
  balance
}: Omit<Effect.Effect.Success<ReturnType<typeof auditPayments>>, "unpaid">) => {
  expect(transfers).toHaveLength(paidOrders.length)
  expect(new Set(transfers.map((log) => log.transactionHash)).size).toBe(transfers.length)
  expect(new Set(transfers.map((log) => log.transactionHash))).toEqual(new Set(paidOrders.map((order) => order.tx)))
  for (const log of transfers) expectWorth(log.args.value!, "1.25")
  expect(balance).toBe(transfers.reduce((sum, log) => sum + log.args.value!, 0n))
}

describe("dependencies that fail under the service", () => {
  it.scopedLive(
    "the embedded PostgreSQL SIGKILLed under load: restarted on its data, database routes served again",
    () =>
      Effect.gen(function* () {
        const { service, dataDir } = yield* embeddedService()
        const before = yield* createOrder(service)
        expect(before.status).toBe(200)
        const traffic = yield* load([
          () => createOrder(service),
          () => callService(service, "GET", `/merchant/orders/${before.body.id}`),
          () => callService(service, "GET", `/merchant/orders/${before.body.id}`),
          () => callService(service, "GET", "/health")
        ])
        yield* awaitSeen(
          "the load is served",
          service,
          Effect.map(traffic.answers, (all) => (all.length >= 20 ? true : undefined))
        )

        const pidFile = path.join(dataDir, "pg", "postmaster.pid")
        const postmaster = pidIn(pidFile)
        process.kill(postmaster, "SIGKILL")
        const killedAt = Date.now()
        const restarted = yield* awaitRestarted(service, "PostgreSQL")
        const served = yield* awaitSeen(
          "a database route answers 200 again",
          service,
          Effect.map(callService(service, "GET", `/merchant/orders/${before.body.id}`), (answer) =>
            answer.status === 200 ? Date.now() : undefined
          )
        )
        const answers = yield* traffic.stop

        const during = answers.filter((answer) => answer.at >= killedAt)
        const events = eventsSince(service, killedAt)
        record("postgres kill: requests after the kill", during.length)
        record("postgres kill: statuses after the kill", statuses(during))
        record("postgres kill: kill to restarted", ms(Date.parse(restarted.timestamp) - killedAt))
        record("postgres kill: kill to served again", ms(served - killedAt))
        record("postgres kill: log lines (not per request) after the kill", events.length)
        for (const line of events) record(`postgres kill: ${line.logLevel}`, line.message.slice(0, 110))
        expect(contractBreaches(answers)).toEqual([])
        expect(during.filter((answer) => answer.status !== 200 && answer.status !== 503)).toEqual([])
        expect(events.filter((line) => line.logLevel === "ERROR").map((line) => line.message)).toEqual([
          "PostgreSQL exited unexpectedly: it was killed by SIGKILL; restarting it"
        ])
        expect(events.filter((line) => line.logLevel === "FATAL")).toEqual([])
        expect(events.filter((line) => "cause" in line)).toEqual([])
        // the same service, on the same data, with a new postmaster
        expect(service.child.exitCode).toBe(null)
        expect(pidIn(pidFile)).not.toBe(postmaster)
        expect(isAlive(pidIn(pidFile))).toBe(true)
        expect((yield* callService(service, "GET", "/ready")).status).toBe(200)
      })
  )

  it.scopedLive(
    "the embedded devnet SIGKILLed under load: restarted from its state on the same port, payments settle again",
    () =>
      Effect.gen(function* () {
        const { service, dataDir, merchant } = yield* embeddedService()
        const first = yield* orderAndPay(service, payers[0]!)
        expect(first.status).toBe(200)
        const paidAt = Date.now()
        const stateFile = path.join(dataDir, "chain", "anvil-state.json")
        // anvil dumps its state every 3 s: the kill comes after a dump that holds the payment
        yield* awaitSeen(
          "the devnet state is dumped after the payment",
          service,
          Effect.sync(() => (existsSync(stateFile) && statSync(stateFile).mtimeMs > paidAt + 50 ? true : undefined))
        )
        const anvil = pidIn(path.join(dataDir, "chain", "anvil.pid"))
        process.kill(anvil, "SIGKILL")
        const killedAt = Date.now()
        const traffic = yield* load([
          (i) => orderAndPay(service, payers[1 + (i % 3)]!),
          (i) => orderAndPay(service, payers[4 + (i % 3)]!),
          () => callService(service, "GET", "/ready")
        ])
        const restarted = yield* awaitRestarted(service, "anvil")
        const settled = yield* awaitPaidAfter(service, traffic.answers, Date.parse(restarted.timestamp))
        const answers = yield* traffic.stop
        // every payment answered paid is one transfer on chain, and no other transfer reached the merchant
        const transfers = yield* transfersTo(service, merchant)
        const paid = answers.filter(isPaid).length
        const events = eventsSince(service, killedAt)
        record("devnet kill: requests after the kill", answers.length)
        record("devnet kill: statuses after the kill", statuses(answers))
        record("devnet kill: kill to restarted", ms(Date.parse(restarted.timestamp) - killedAt))
        record("devnet kill: kill to a payment settled", ms(settled - killedAt))
        record("devnet kill: payments answered paid / transfers on chain", `${paid + 1} / ${transfers.length}`)
        record("devnet kill: log lines (not per request) after the kill", events.length)
        for (const line of events) record(`devnet kill: ${line.logLevel}`, line.message.slice(0, 110))
        expect(contractBreaches(answers)).toEqual([])
        expect(answers.filter((answer) => ![200, 402, 503].includes(answer.status ?? 0))).toEqual([])
        expect(transfers).toHaveLength(paid + 1)
        expect(events.filter((line) => line.logLevel === "ERROR").map((line) => line.message)).toEqual([
          "anvil exited unexpectedly: it was killed by SIGKILL; restarting it"
        ])
        expect(events.filter((line) => line.logLevel === "FATAL")).toEqual([])
        expect(events.filter((line) => "cause" in line)).toEqual([])
        expect(service.child.exitCode).toBe(null)
      })
  )

  it.scopedLive(
    "the devnet restarted from an older state under a payment stream (>= 10 blocks lost): payments settle again, every source agrees",
    () =>
      Effect.gen(function* () {
        const { service, dataDir, merchant } = yield* embeddedService({ RECONCILE_INTERVAL: "500 millis" })
        const devnet = devnetOf(service)
        const chain = createPublicClient({ transport: http(devnet.rpcUrl) })
        const { orders, payOne } = yield* auditedPayments(service)
        const traffic = yield* load([
          (i) => payOne(payers[i % 3]!),
          (i) => payOne(payers[3 + (i % 3)]!),
          (i) => payOne(payers[6 + (i % 2)]!)
        ])
        yield* awaitSeen(
          "payments are settled",
          service,
          Effect.map(traffic.answers, (all) => (all.filter((a) => a.status === 200).length >= 10 ? true : undefined))
        )
        // Right after a state dump, more blocks than the dump holds: payments, then 12 empty ones.
        const stateFile = path.join(dataDir, "chain", "anvil-state.json")
        // anvil writes its first dump some seconds after it starts: none yet counts as the oldest.
        const dumpedAt = () => (existsSync(stateFile) ? statSync(stateFile).mtimeMs : 0)
        const before = dumpedAt()
        yield* awaitSeen(
          "a state dump",
          service,
          Effect.sync(() => (dumpedAt() > before ? true : undefined))
        )
        yield* Effect.sleep("1500 millis")
        yield* Effect.promise(() => chain.request({ method: "anvil_mine" as never, params: ["0xc"] as never }))
        const headBeforeKill = yield* Effect.promise(() => chain.getBlockNumber())
        // The last 40 blocks before the kill, to find afterwards where the restored chain forked off.
        const hashesBeforeKill = yield* Effect.promise(() =>
          Promise.all(
            Array.from({ length: 40 }, (_, i) =>
              chain.getBlock({ blockNumber: headBeforeKill - BigInt(i) }).then((block) => block.hash)
            )
          )
        )
        process.kill(pidIn(path.join(dataDir, "chain", "anvil.pid")), "SIGKILL")
        const killedAt = Date.now()
        const restarted = yield* awaitRestarted(service, "anvil")
        const settled = yield* awaitPaidAfter(service, traffic.answers, Date.parse(restarted.timestamp))
        yield* Effect.sleep("3 seconds")
        const answers = yield* traffic.stop
        const { paidOrders, unpaid, transfers, balance } = yield* auditPayments(service, merchant, yield* orders)
        // Blocks lost: those before the kill that are no longer on the chain (the restored state's
        // blocks, and everything mined since, are new ones).
        const hashesNow = yield* Effect.promise(() =>
          Promise.all(
            hashesBeforeKill.map((_, i) =>
              chain
                .getBlock({ blockNumber: headBeforeKill - BigInt(i) })
                .then((block) => block.hash)
                .catch(() => undefined)
            )
          )
        )
        const kept = hashesNow.findIndex((hash, i) => hash === hashesBeforeKill[i])
        const lost = kept === -1 ? hashesBeforeKill.length : kept
        const gapLines = lines(service).filter((line) => line.message.startsWith("relayer nonce gap"))
        record("devnet restart: blocks lost", lost)
        record("devnet restart: requests", answers.length)
        record("devnet restart: statuses", statuses(answers))
        record("devnet restart: kill to a payment settled", ms(settled - killedAt))
        record(
          "devnet restart: orders paid / transfers on chain / payTo delta (1.25 each)",
          `${paidOrders.length} / ${transfers.length} / ${Number(balance / 10n ** 16n) / 100}`
        )
        record("devnet restart: orders left unpaid (open or expired)", unpaid)
        for (const line of gapLines) record(`devnet restart: ${line.logLevel}`, line.message.slice(0, 140))
        expect(lost).toBeGreaterThanOrEqual(10)
        expect(settled - killedAt).toBeLessThan(30_000)
        expect(contractBreaches(answers)).toEqual([])
        expectSourcesAgree({ paidOrders, transfers, balance })
        expect(gapLines.length).toBeGreaterThan(0)
        expect(service.child.exitCode).toBe(null)
      })
  )

  it.scopedLive(
    "the last blocks reorganised out under a payment stream (anvil_reorg, 3 times): every paid order is one transfer, none doubled",
    () =>
      Effect.gen(function* () {
        const REORGS = 3
        const DEPTH = 3
        // Followed until deeper than any reorg here: a settlement final at once (the devnet's
        // default of 0) is never checked again, so one reorganised out afterwards would be lost.
        const { service, merchant } = yield* embeddedService({
          RECONCILE_INTERVAL: "500 millis",
          CHAIN_CONFIRMATIONS: "12"
        })
        const chain = createPublicClient({ transport: http(devnetOf(service).rpcUrl) })
        const { orders, payOne } = yield* auditedPayments(service)
        const traffic = yield* load([
          (i) => payOne(payers[i % 3]!),
          (i) => payOne(payers[3 + (i % 3)]!),
          (i) => payOne(payers[6 + (i % 2)]!)
        ])
        let droppedTransactions = 0
        let lastReorgAt = 0
        for (let reorg = 1; reorg <= REORGS; reorg++) {
          // A few more payments settled since the last reorg, then the last DEPTH blocks replaced by empty ones.
          const before = yield* paidSoFar(traffic.answers)
          yield* awaitSeen(
            `payments settled before reorg ${reorg}`,
            service,
            Effect.map(paidSoFar(traffic.answers), (paid) => (paid >= before + 5 ? true : undefined))
          )
          const head = yield* Effect.promise(() => chain.getBlockNumber())
          const dropped = yield* Effect.promise(() =>
            Promise.all(
              Array.from({ length: DEPTH }, (_, i) =>
                chain.getBlock({ blockNumber: head - BigInt(i) }).then((block) => block.transactions.length)
              )
            )
          )
          droppedTransactions += dropped.reduce((sum, n) => sum + n, 0)
          yield* Effect.promise(() => chain.request({ method: "anvil_reorg" as never, params: [DEPTH, []] as never }))
          lastReorgAt = Date.now()
        }
        const settled = yield* awaitPaidAfter(service, traffic.answers, lastReorgAt)
        const answers = yield* traffic.stop
        // Every order decided, and the lost settlements mined again: every paid order's transfer back on chain.
        const ids = yield* orders
        const { paidOrders, unpaid, transfers, balance } = yield* eventually(
          "every paid order's transfer to be on chain again",
          auditPayments(service, merchant, ids),
          (audit) => audit.transfers.length >= audit.paidOrders.length,
          { explain: () => service.output().slice(-3000) }
        )
        const lost = lines(service).filter(
          (line) =>
            line.message === "settlement transaction no longer on chain; sending the same transaction again" ||
            line.message.startsWith("relayer nonce gap")
        )
        record("reorg under load: reorgs x depth", `${REORGS} x ${DEPTH} blocks`)
        record("reorg under load: transactions in the dropped blocks", droppedTransactions)
        record("reorg under load: requests", answers.length)
        record("reorg under load: statuses", statuses(answers))
        record("reorg under load: last reorg to a payment settled", ms(settled - lastReorgAt))
        record(
          "reorg under load: orders paid / transfers on chain / payTo delta (1.25 each)",
          `${paidOrders.length} / ${transfers.length} / ${Number(balance / 10n ** 16n) / 100}`
        )
        record("reorg under load: orders left unpaid", unpaid)
        record("reorg under load: lost-transaction WARN lines (tracker or nonce check)", lost.length)
        expect(droppedTransactions).toBeGreaterThan(0)
        expect(contractBreaches(answers)).toEqual([])
        expectSourcesAgree({ paidOrders, transfers, balance })
        expect(lost.length).toBeGreaterThan(0)
        expect(service.child.exitCode).toBe(null)
      })
  )

  it.scopedLive(
    "a base-fee spike under a payment stream (anvil_setNextBlockBaseFeePerGas, 5 blocks): stuck settlements replaced with the same nonce and a higher fee, every source agrees",
    () =>
      Effect.gen(function* () {
        const SPIKE_BLOCKS = 5
        const spike = parseGwei("100")
        // MAX_FEE_PER_GAS well above the spike: a replacement outbids it, at the estimate the spike asks.
        const { service, merchant } = yield* embeddedService({
          RECONCILE_INTERVAL: "500 millis",
          RELAYER_STUCK_AFTER: "2 seconds",
          MAX_FEE_PER_GAS: "500"
        })
        // No cached block number: each spike block is waited for.
        const chain = createPublicClient({ transport: http(devnetOf(service).rpcUrl), cacheTime: 0 })
        const rpc = (method: string, params: ReadonlyArray<unknown>) =>
          Effect.promise(() => chain.request({ method: method as never, params: params as never }))
        const nextBlock = Effect.gen(function* () {
          const head = yield* Effect.promise(() => chain.getBlockNumber())
          return yield* eventually(
            `a block after ${head}`,
            Effect.promise(() => chain.getBlock()),
            (block) => block.number > head
          )
        })
        // A block a second, as a public chain mines: a transaction waits in the pool for a block,
        // and the spike prices it out of the next ones.
        yield* rpc("evm_setIntervalMining", [1])
        const relayer = privateKeyToAccount(DEVNET_RELAYER_KEY).address
        const firstBlock = (yield* Effect.promise(() => chain.getBlockNumber())) + 1n
        const { orders, payOne } = yield* auditedPayments(service)
        const traffic = yield* load([
          (i) => payOne(payers[i % 3]!),
          (i) => payOne(payers[3 + (i % 3)]!),
          (i) => payOne(payers[6 + (i % 2)]!)
        ])
        yield* awaitSeen(
          "payments settled before the spike",
          service,
          Effect.map(paidSoFar(traffic.answers), (paid) => (paid >= 5 ? true : undefined))
        )
        const normal = (yield* Effect.promise(() => chain.getBlock())).baseFeePerGas!
        const spikeAt = Date.now()
        const spikeBlocks: Array<bigint> = []
        for (let block = 1; block <= SPIKE_BLOCKS; block++) {
          yield* rpc("anvil_setNextBlockBaseFeePerGas", [`0x${spike.toString(16)}`])
          const mined = yield* nextBlock
          spikeBlocks.push(mined.baseFeePerGas!)
        }
        yield* rpc("anvil_setNextBlockBaseFeePerGas", [`0x${normal.toString(16)}`])
        yield* nextBlock
        const spikeEndedAt = Date.now()
        const bumpLines = () =>
          lines(service).filter((line) =>
            line.message.startsWith("settlement transaction not mined in time: replaced with the same nonce")
          )
        yield* awaitSeen(
          "a stuck settlement replaced",
          service,
          Effect.sync(() => (bumpLines().length > 0 ? true : undefined))
        )
        const settled = yield* awaitPaidAfter(service, traffic.answers, spikeAt)
        const settledAfterSpike = yield* awaitPaidAfter(service, traffic.answers, spikeEndedAt)
        const answers = yield* traffic.stop
        const { paidOrders, unpaid, transfers, balance } = yield* auditPayments(service, merchant, yield* orders)
        // Every relayer transaction mined meanwhile: a settlement, or an empty one to itself that
        // filled a nonce whose refused transaction could never be mined (the nonce check).
        const head = yield* Effect.promise(() => chain.getBlockNumber())
        const relayerTransactions = (yield* Effect.forEach(
          Array.from({ length: Number(head - firstBlock) + 1 }, (_, i) => firstBlock + BigInt(i)),
          (blockNumber) => Effect.promise(() => chain.getBlock({ blockNumber, includeTransactions: true })),
          { concurrency: 4 }
        )).flatMap((block) => block.transactions.filter((tx) => tx.from.toLowerCase() === relayer.toLowerCase()))
        const fills = relayerTransactions.filter((tx) => tx.to?.toLowerCase() === relayer.toLowerCase())
        const settlements = relayerTransactions.filter((tx) => !fills.includes(tx))
        const bumps = bumpLines().map((line) => {
          const annotations = line.annotations as { readonly "order.id": string; readonly "tx.hash": Hex }
          return {
            order: annotations["order.id"],
            hash: annotations["tx.hash"],
            nonce: Number(/same nonce (\d+) /.exec(line.message)![1]),
            at: Date.parse(line.timestamp)
          }
        })
        const bumpedOrders = new Set(bumps.map((bump) => bump.order))
        // The nonce each paid order's mined transaction used: a bumped one's must be the nonce it was bumped at.
        const minedNonces = new Map(
          yield* Effect.forEach(
            paidOrders,
            (order) =>
              Effect.promise(() =>
                chain.getTransaction({ hash: order.tx as Hex }).then((tx) => [order.id as string, tx.nonce] as const)
              ),
            { concurrency: 4 }
          )
        )
        record(
          "fee spike: base fee before / in the spike / cap",
          `${normal} wei / ${spike / 10n ** 9n} gwei x ${SPIKE_BLOCKS} blocks / 500 gwei`
        )
        record("fee spike: requests", answers.length)
        record("fee spike: statuses", statuses(answers))
        record(
          "fee spike: transactions bumped (WARN lines) / orders they settle",
          `${bumps.length} / ${bumpedOrders.size}`
        )
        record("fee spike: spike to first replacement", ms(Math.min(...bumps.map((bump) => bump.at)) - spikeAt))
        record("fee spike: spike to a payment settled", ms(settled - spikeAt))
        record("fee spike: spike over to a payment settled", ms(settledAfterSpike - spikeEndedAt))
        record(
          "fee spike: orders paid / transfers on chain / payTo delta (1.25 each)",
          `${paidOrders.length} / ${transfers.length} / ${Number(balance / 10n ** 16n) / 100}`
        )
        record(
          "fee spike: relayer transactions mined (settlements + nonces filled)",
          `${relayerTransactions.length} (${settlements.length} + ${fills.length})`
        )
        record("fee spike: orders left unpaid", unpaid)
        expect(spikeBlocks.every((fee) => fee === spike)).toBe(true)
        expect(contractBreaches(answers)).toEqual([])
        expect(answers.filter((answer) => answer.status !== 200 && answer.status !== 202)).toEqual([])
        expect(unpaid).toBe(0)
        expectSourcesAgree({ paidOrders, transfers, balance })
        // Replaced, never re-sent at a new nonce: one nonce per settlement, kept by every bump.
        expect(bumps.length).toBeGreaterThan(0)
        for (const bump of bumps) expect(minedNonces.get(bump.order)).toBe(bump.nonce)
        expect(new Set(settlements.map((tx) => tx.hash))).toEqual(new Set(paidOrders.map((order) => order.tx)))
        expect(settlements).toHaveLength(paidOrders.length)
        expect(fills.filter((tx) => tx.input !== "0x" || tx.value !== 0n)).toEqual([])
        expect(service.child.exitCode).toBe(null)
      })
  )

  it.scopedLive(
    "a devnet that cannot be restarted (its port taken): exit 1 with one fatal line, nothing left running",
    () =>
      Effect.gen(function* () {
        const { service, dataDir } = yield* embeddedService()
        const port = Number(new URL(devnetOf(service).rpcUrl).port)
        process.kill(pidIn(path.join(dataDir, "chain", "anvil.pid")), "SIGKILL")
        // The port is taken before the first restart (200 ms later), and kept.
        // it takes the port only: a connection is closed at once (and none holds up its close)
        const squatter = createServer((socket) => socket.destroy())
        yield* Effect.acquireRelease(
          Effect.async<void, string>((resume) => {
            squatter.once("error", (error) => resume(Effect.fail(String(error))))
            squatter.listen(port, "127.0.0.1", () => resume(Effect.void))
          }).pipe(
            Effect.tapError(() => Effect.sync(() => squatter.removeAllListeners("error"))),
            Effect.retry(Schedule.spaced("5 millis").pipe(Schedule.upTo("2 seconds"))),
            Effect.orDieWith(() => new Error(`port ${port} could not be taken before anvil restarted`))
          ),
          () =>
            Effect.async<void>((resume) => {
              squatter.close(() => resume(Effect.void))
            })
        )
        const startedAt = Date.now()
        const code = yield* service.exited.pipe(
          Effect.timeoutFail({
            duration: "60 seconds",
            onTimeout: () => new Error("the service did not exit within 60 s")
          }),
          Effect.orDie
        )
        const exitedMs = Date.now() - startedAt
        const all = lines(service)
        const fatal = all.filter((line) => line.logLevel === "FATAL")
        record("devnet lost: kill to exit", ms(exitedMs))
        record(
          "devnet lost: restart attempts logged",
          all.filter((line) => / did not restart \(\d+ of \d+ failures in a row\)$/.test(line.message)).length
        )
        expect(code).toBe(1)
        expect(fatal).toHaveLength(1)
        expect(fatal[0]!.message).toMatch(
          /^stopping: anvil \(.+anvil-state\.json\) exited and could not be restarted: 5 failures in a row; the last: exited with code \d+ before it was ready/
        )
        expect(all.filter((line) => line.logLevel === "ERROR").map((line) => line.message)).toEqual([
          "anvil exited unexpectedly: it was killed by SIGKILL; restarting it"
        ])
        // the fatal line is the last; PostgreSQL and the watchdogs went down with the service
        expect(all.at(-1)?.logLevel).toBe("FATAL")
        expect(processesMentioning(dataDir)).toEqual([])
      })
  )

  it.scopedLive("a 20 s database outage under load: a bounded number of log lines, no stack trace, served again", () =>
    Effect.gen(function* () {
      const databaseUrl = yield* temporaryDatabaseUrl
      const upstream = new URL(databaseUrl)
      const proxy = yield* startTcpProxy({ host: upstream.hostname, port: Number(upstream.port || 5432) })
      const { service } = yield* embeddedService({ DATABASE_URL: proxy.url(databaseUrl) })
      const before = yield* createOrder(service)
      expect(before.status).toBe(200)
      const traffic = yield* load([
        () => createOrder(service),
        () => callService(service, "GET", `/merchant/orders/${before.body.id}`),
        () => callService(service, "POST", "/auth/challenge", { json: { address: payers[0]!.address } }),
        () => callService(service, "GET", `/merchant/orders/${before.body.id}`)
      ])
      yield* awaitSeen(
        "the load to be served",
        service,
        Effect.map(traffic.answers, (all) => (all.length >= 20 ? true : undefined))
      )
      const cutAt = Date.now()
      proxy.setMode("refuse")
      yield* Effect.sleep("20 seconds")
      proxy.setMode("forward")
      const back = yield* awaitSeen("the outage is over", service, lineStarting(service, "database available again"))
      const answers = yield* traffic.stop
      const during = answers.filter((answer) => answer.at >= cutAt && answer.at <= Date.parse(back.timestamp))
      const within = (line: LogLine) =>
        Date.parse(line.timestamp) >= cutAt && Date.parse(line.timestamp) <= Date.parse(back.timestamp)
      const events = lines(service).filter((line) => within(line) && !perRequest(line))
      const requestLines = lines(service).filter((line) => within(line) && perRequest(line))
      record("db outage: length", ms(Date.parse(back.timestamp) - cutAt))
      record("db outage: requests during it", during.length)
      record("db outage: statuses during it", statuses(during))
      record("db outage: per-request log lines (access log, orders)", requestLines.length)
      record("db outage: other log lines", events.length)
      for (const line of events) record(`db outage: ${line.logLevel}`, line.message.slice(0, 110))
      expect(contractBreaches(answers)).toEqual([])
      expect(during.filter((answer) => answer.status === 503).length).toBeGreaterThan(100)
      expect(events.filter((line) => "cause" in line)).toEqual([])
      // one line when it went, a summary every 10 s, one when it came back: nothing else
      const kinds = events.map((line) =>
        line.message.startsWith("database unavailable: ")
          ? "went"
          : line.message.startsWith("database still unavailable after ")
            ? "summary"
            : line.message.startsWith("database available again after ")
              ? "back"
              : `other: ${line.logLevel} ${line.message}`
      )
      expect(kinds[0]).toBe("went")
      expect(kinds.at(-1)).toBe("back")
      expect(kinds.slice(1, -1).every((kind) => kind === "summary")).toBe(true)
      expect(events.length).toBeLessThanOrEqual(5)
      expect(back.message).toMatch(
        /^database available again after \d+\.\d s; meanwhile \d+ requests refused, \d+ background jobs? failed$/
      )
      expect((yield* createOrder(service)).status).toBe(200)
    })
  )
})
