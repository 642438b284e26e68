/**
 * One agent replica for `bench/agent.ts`, as its own process: builds the agent loop as a service
 * replica does (over `DATABASE_URL`; the devnet of `CHAIN_RPC_URL`, or the in-memory chain when
 * `AGENT_BENCH_CHAIN=memory`), then answers commands on stdin, one JSON line on stdout each:
 *
 *   tick [at]   one full tick (decided at `at`, ms, when given): its summary, wall and CPU time,
 *               the SQL statements it sent (counted through the SQL client) and the peak RSS so far
 *
 * The parent starts every replica first and then sends `tick` to all of them at once, so the
 * figures leave start-up out.
 */
import { createInterface } from "node:readline"
import * as Statement from "@effect/sql/Statement"
import { Cause, Chunk, Effect, Layer, ManagedRuntime } from "effect"
import { AgentLoop } from "../src/agent/AgentLoop.js"
import { CardDebts } from "../src/cards/CardDebts.js"
import { Statement as CardStatement } from "../src/cards/Statement.js"
import { InMemoryChain } from "../src/chain/InMemoryChain.js"
import { AgentEventsLive, DebtEventsLive, Events } from "../src/events/Events.js"
import { Market } from "../src/market/Market.js"
import { portsLayer } from "../src/Ports.js"
import { AppConfig } from "../src/runtime/Config.js"
import { SqlLive } from "../src/storage/Database.js"

let statements = 0
const countStatements = Statement.setTransformer((statement) =>
  Effect.sync(() => {
    statements++
    return statement
  })
)

const ports = process.env.AGENT_BENCH_CHAIN === "memory" ? portsLayer({ chain: InMemoryChain.layer() }) : portsLayer()

const ReplicaLive = AgentLoop.Default.pipe(
  Layer.provide([
    Market.Default,
    CardStatement.Default,
    CardDebts.Default.pipe(Layer.provide(DebtEventsLive)),
    AgentEventsLive
  ]),
  Layer.provide(Events.Default),
  Layer.provide(ports),
  Layer.provide(SqlLive),
  Layer.provide(AppConfig.layer),
  Layer.provide(countStatements)
)

const runtime = ManagedRuntime.make(ReplicaLive)

/** MB of the process's memory: its resident set and V8's heap in use (both sampled during a tick). */
const memoryMb = () => {
  const { heapUsed, rss } = process.memoryUsage()
  return { rss: rss / 2 ** 20, heap: heapUsed / 2 ** 20 }
}

const liveHeap = process.env.BENCH_AGENT_LIVE_HEAP === "1"

/** The tick's peak memory, sampled every 50 ms (200 ms with a collection before each): what grows with the cards a tick holds at once. */
const samplePeaks = () => {
  const peak = memoryMb()
  const timer = setInterval(
    () => {
      // BENCH_AGENT_LIVE_HEAP: collect before each sample, so the peak is the live set, not garbage.
      if (liveHeap) globalThis.gc?.()
      const now = memoryMb()
      peak.rss = Math.max(peak.rss, now.rss)
      peak.heap = Math.max(peak.heap, now.heap)
    },
    liveHeap ? 200 : 50
  )
  return () => {
    clearInterval(timer)
    return peak
  }
}

const tick = (at: number | undefined) =>
  Effect.gen(function* () {
    const loop = yield* AgentLoop
    const before = { statements, cpu: process.cpuUsage(), wall: performance.now() }
    const peaks = samplePeaks()
    const summary = yield* loop.tick(at)
    const cpu = process.cpuUsage(before.cpu)
    const peak = peaks()
    // What the tick left behind once collected (run with --expose-gc): a tick that keeps nothing
    // of its cards ends where it started.
    globalThis.gc?.()
    return {
      ...summary,
      wallMs: performance.now() - before.wall,
      cpuMs: (cpu.user + cpu.system) / 1000,
      statements: statements - before.statements,
      peakRssMb: peak.rss,
      peakHeapMb: peak.heap,
      heapAfterMb: memoryMb().heap
    }
  })

/** A failure with what PostgreSQL said (a SqlError's message alone is "Failed to execute statement"). */
const describe = (cause: Cause.Cause<unknown>) =>
  [
    ...Chunk.toArray(Cause.failures(cause)).flatMap((error) =>
      error instanceof Error && error.cause instanceof Error ? [`${error.message}: ${error.cause.message}`] : []
    ),
    Cause.pretty(cause)
  ].join(" | ")

await runtime.runPromise(AgentLoop)
process.stdout.write(`${JSON.stringify({ ready: true })}\n`)
for await (const line of createInterface({ input: process.stdin })) {
  const [command, at] = line.trim().split(" ")
  if (command === "tick") {
    // A failed tick is an answer too (the parent reports it), not the end of the replica.
    const result = await runtime.runPromise(
      tick(at === undefined ? undefined : Number(at)).pipe(
        Effect.catchAllCause((cause) => Effect.succeed({ error: describe(cause).slice(0, 2000) }))
      )
    )
    process.stdout.write(`${JSON.stringify(result)}\n`)
  } else if (command === "exit") {
    break
  }
}
await runtime.dispose()
process.exit(0)
