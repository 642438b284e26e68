/**
 * (h) live events: 1,000 concurrent GET /me/events streams on one replica (one per user) while
 * events flow at a steady rate, against the bare `node:http` + `pg` LISTEN peer doing the core of
 * the same job (bench/peers/bareEvents.ts). Each run starts a fresh server; users and sessions are
 * inserted directly, the events are published by this process with the service's own publishing
 * statement (EventRepo.publish: as another replica's writers would), and the streams are read by
 * this process with the service's SSE parser.
 *
 * Measured per run: the server's CPU per event delivered over the flow, the delivery latency (from
 * the publishing statement to the event read here, one clock), the RSS growth per open stream and
 * over the flow. Checked per run: every stream received every event of its user, once, in order.
 */
import { createHash, randomBytes } from "node:crypto"
import { Agent, type ClientRequest, request } from "node:http"
import { PgClient } from "@effect/sql-pg"
import { Effect, Layer, Redacted } from "effect"
import { getAddress } from "viem"
import { EventRepo } from "../src/events/EventRepo.js"
import { SseParser } from "../src/events/Sse.js"
import { sqlLayer } from "../src/storage/Database.js"
import {
  alternating,
  type BenchContext,
  median,
  percentile,
  type RatioRow,
  type Section,
  type ServerProcess,
  serviceEnv,
  startPeer,
  startService
} from "./harness.js"

interface User {
  readonly address: string
  readonly token: string
}

/** One open stream, as read by this process. */
interface StreamReader {
  readonly user: User
  /** The `ready` event's id: the stream goes on from there. */
  readonly start: number
  readonly ids: Array<number>
  readonly latencies: Array<number>
  readonly request: ClientRequest
}

interface Run {
  /** The server's CPU over the flow, less what it spends idle with the streams open, per event. */
  readonly cpuPerEventUs: number
  /** The server's CPU per second with the streams open and no event (its loops, heartbeats). */
  readonly idleCpuMsPerSecond: number
  readonly latencyP50Ms: number
  readonly latencyP99Ms: number
  readonly rssPerStreamKb: number
  readonly rssFlowMb: number
  /** Streams that did not receive exactly their user's events, once, in order. */
  readonly wrong: number
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms))

/** How long the server's idle CPU is sampled before the flow. */
const IDLE_SAMPLE_MS = 5_000

/** Inserts `count` users, each with a session whose token is known here. */
const insertUsers = (sql: PgClient.PgClient, count: number) =>
  Effect.gen(function* () {
    const users: Array<User> = Array.from({ length: count }, () => ({
      // As the service stores addresses: EIP-55 checksummed.
      address: getAddress(`0x${randomBytes(20).toString("hex")}`),
      token: randomBytes(32).toString("base64url")
    }))
    const addresses = users.map((user) => user.address)
    const hashes = users.map((user) => createHash("sha256").update(user.token, "utf8").digest("hex"))
    yield* sql`INSERT INTO users (address, created_at) SELECT unnest(${addresses}::text[]), now()`
    yield* sql`INSERT INTO sessions (token_hash, address, created_at, expires_at)
               SELECT decode(h, 'hex'), a, now(), now() + interval '1 day'
               FROM unnest(${hashes}::text[], ${addresses}::text[]) AS t(h, a)`
    return users
  })

/** Opens a user's stream; resolves once its `ready` event arrived. */
const openStream = (baseUrl: string, agent: Agent, user: User) =>
  new Promise<StreamReader>((resolve, reject) => {
    const ids: Array<number> = []
    const latencies: Array<number> = []
    const req = request(
      `${baseUrl}/me/events`,
      { agent, headers: { authorization: `Bearer ${user.token}` } },
      (response) => {
        if (response.statusCode !== 200) {
          reject(new Error(`GET /me/events answered ${response.statusCode}`))
          response.resume()
          return
        }
        response.setEncoding("utf8")
        const parser = new SseParser()
        response.on("data", (text: string) => {
          for (const event of parser.push(text)) {
            if (event.event === "ready") {
              resolve({ user, start: Number(event.lastEventId), ids, latencies, request: req })
            } else if (event.event === "strategy") {
              ids.push(Number(event.lastEventId))
              latencies.push(Date.now() - (JSON.parse(event.data) as { updatedAt: number }).updatedAt)
            }
          }
        })
        response.on("error", () => {})
      }
    )
    req.on("error", reject)
    req.end()
  })

/** Opens a stream for each user, `concurrency` at a time. */
const openStreams = async (baseUrl: string, agent: Agent, users: ReadonlyArray<User>) => {
  const readers: Array<StreamReader> = []
  for (let i = 0; i < users.length; i += 50) {
    readers.push(...(await Promise.all(users.slice(i, i + 50).map((user) => openStream(baseUrl, agent, user)))))
  }
  return readers
}

/** Publishes `count` strategy events round-robin over the users at `perSecond`, in 50 ms batches. */
const publish = (users: ReadonlyArray<User>, count: number, perSecond: number) =>
  Effect.gen(function* () {
    const repo = yield* EventRepo
    const perBatch = Math.max(1, Math.round(perSecond / 20))
    const started = Date.now()
    for (let sent = 0, batch = 0; sent < count; sent += perBatch, batch++) {
      const size = Math.min(perBatch, count - sent)
      yield* repo.publish(
        Array.from({ length: size }, (_, i) => ({
          address: users[(sent + i) % users.length]!.address,
          type: "strategy" as const,
          data: { targets: { NVDA: 1 }, weeklySpendUsd: sent + i, timeZone: "UTC", updatedAt: Date.now() }
        }))
      )
      const next = started + (batch + 1) * 50
      if (next > Date.now()) yield* Effect.sleep(next - Date.now())
    }
  })

/** Waits until every reader holds `each` events (or the deadline passes). */
const awaitDelivered = async (readers: ReadonlyArray<StreamReader>, each: number, deadlineMs: number) => {
  while (Date.now() < deadlineMs && readers.some((reader) => reader.ids.length < each)) await sleep(20)
}

const closeAll = (agent: Agent, readers: ReadonlyArray<StreamReader>) => {
  for (const reader of readers) reader.request.destroy()
  agent.destroy()
}

/** One measured run on a fresh server: warm-up, open the streams, let the events flow. */
const runOnce = (ctx: BenchContext, server: ServerProcess, users: ReadonlyArray<User>) =>
  Effect.gen(function* () {
    const { count, perSecond } = ctx.sizes.events
    const each = Math.floor(count / users.length)
    const total = each * users.length
    // Warm-up (JIT, pools): a few streams and events, then closed.
    const warmAgent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY })
    const warmUsers = users.slice(0, Math.min(50, users.length))
    const warm = yield* Effect.promise(() => openStreams(server.baseUrl, warmAgent, warmUsers))
    yield* publish(warmUsers, warmUsers.length * 5, perSecond)
    yield* Effect.promise(() => awaitDelivered(warm, 5, Date.now() + 60_000))
    closeAll(warmAgent, warm)
    yield* Effect.sleep(ctx.sizes.idleSettleMs)

    const rssIdle = server.rssMb()
    const agent = new Agent({ keepAlive: true, maxSockets: Number.POSITIVE_INFINITY })
    const readers = yield* Effect.promise(() => openStreams(server.baseUrl, agent, users))
    yield* Effect.sleep(ctx.sizes.idleSettleMs)
    const rssOpen = server.rssMb()
    // The server's own idle work (loops, heartbeats) over a while, to be taken out of the flow's CPU.
    const idleStart = { cpu: server.cpuMs(), at: performance.now() }
    yield* Effect.sleep(IDLE_SAMPLE_MS)
    const idleCpuMsPerSecond = ((server.cpuMs() - idleStart.cpu) * 1000) / (performance.now() - idleStart.at)
    const flowStart = { cpu: server.cpuMs(), at: performance.now() }
    yield* publish(users, total, perSecond)
    yield* Effect.promise(() => awaitDelivered(readers, each, Date.now() + 120_000))
    const cpu = server.cpuMs() - flowStart.cpu - (idleCpuMsPerSecond * (performance.now() - flowStart.at)) / 1000
    const rssFlow = server.rssMb()
    closeAll(agent, readers)
    const wrong = readers.filter(
      (reader) => reader.ids.length !== each || reader.ids.some((id, i) => id !== reader.start + 1 + i)
    ).length
    const latencies = readers.flatMap((reader) => reader.latencies)
    return {
      cpuPerEventUs: (cpu * 1000) / total,
      idleCpuMsPerSecond,
      latencyP50Ms: percentile(latencies, 50),
      latencyP99Ms: percentile(latencies, 99),
      rssPerStreamKb: ((rssOpen - rssIdle) * 1024) / users.length,
      rssFlowMb: rssFlow - rssOpen,
      wrong
    } satisfies Run
  })

export const eventsSection: Section = {
  name: "events",
  about: "1,000 concurrent GET /me/events streams with events flowing, against a bare node:http + pg LISTEN server",
  run: (ctx) =>
    Effect.gen(function* () {
      const { streams, count, perSecond } = ctx.sizes.events
      const devnet = yield* ctx.sharedDevnet
      // The shared service has migrated the database the peer reads.
      yield* ctx.sharedService
      const sql = yield* PgClient.PgClient
      const users = yield* insertUsers(sql, streams)
      const runs = { service: [] as Array<Run>, bare: [] as Array<Run> }
      for (let round = 0; round < ctx.sizes.rounds; round++) {
        for (const side of alternating(round, "service" as const, "bare" as const)) {
          const run = yield* Effect.scoped(
            Effect.gen(function* () {
              const server =
                side === "service"
                  ? yield* startService(ctx, serviceEnv(ctx, devnet, `events-${round}`))
                  : yield* startPeer(ctx, "bareEvents", { DATABASE_URL: ctx.databaseUrl })
              return yield* runOnce(ctx, server, users)
            })
          )
          runs[side].push(run)
          ctx.progress(
            `[events] round ${round + 1}/${ctx.sizes.rounds} ${side}: CPU ${run.cpuPerEventUs.toFixed(0)} µs/event ` +
              `(idle ${run.idleCpuMsPerSecond.toFixed(1)} ms/s taken out), ` +
              `latency p50 ${run.latencyP50Ms.toFixed(0)} ms p99 ${run.latencyP99Ms.toFixed(0)} ms, ` +
              `RSS +${run.rssPerStreamKb.toFixed(1)} KB/stream, +${run.rssFlowMb.toFixed(1)} MB over the flow, ` +
              `${run.wrong} stream(s) wrong`
          )
        }
      }
      const row = (measure: string, pick: (run: Run) => number): RatioRow => ({
        measure: `events, ${streams.toLocaleString("en-US")} streams, ${perSecond}/s: ${measure}`,
        better: "lower",
        reference: "bare node:http + pg LISTEN, a query per stream and notification",
        service: runs.service.map(pick),
        peer: runs.bare.map(pick),
        errors: [
          runs.service.reduce((sum, run) => sum + run.wrong, 0),
          runs.bare.reduce((sum, run) => sum + run.wrong, 0)
        ]
      })
      const wrong = runs.service.reduce((sum, run) => sum + run.wrong, 0)
      return {
        ratios: [
          row("server CPU per event delivered (idle CPU taken out), µs", (run) => run.cpuPerEventUs),
          row("server CPU while idle with the streams open, ms/s", (run) => run.idleCpuMsPerSecond),
          row("delivery latency p50, ms", (run) => run.latencyP50Ms),
          row("delivery latency p99, ms", (run) => run.latencyP99Ms),
          row("RSS growth per open stream, KB", (run) => run.rssPerStreamKb),
          row("RSS growth over the flow, MB", (run) => run.rssFlowMb)
        ],
        counts: [],
        checks: [
          `events: ${runs.service.length} run(s) of ${streams} streams and ${count} events; streams that did not ` +
            `receive every event of their user exactly once and in order: ${wrong} (service), ` +
            `${runs.bare.reduce((sum, run) => sum + run.wrong, 0)} (bare). Median service CPU per event ` +
            `${median(runs.service.map((run) => run.cpuPerEventUs)).toFixed(0)} µs.`
        ]
      }
    }).pipe(
      Effect.provide(EventRepo.Default.pipe(Layer.provideMerge(sqlLayer(Redacted.make(ctx.databaseUrl))))),
      Effect.mapError((error) => (error instanceof Error ? error : new Error(String(error))))
    )
}
