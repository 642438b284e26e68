/**
 * (e) cold start and idle memory: a fresh process each run, from spawn to the first 200 from
 * /health, then its resident memory after it has idled a while. The service starts with its
 * `start` command against the shared (already migrated) database and devnet, on an existing data
 * directory: a first start, not measured, builds the bundle (and its code cache) and makes the
 * directory, as a user's first `npm start` does. The peer is the bare `node:http` + `pg` server,
 * which also connects to the database before it listens.
 */
import { Effect } from "effect"
import {
  alternating,
  type BenchContext,
  type RatioRow,
  type Section,
  serviceEnv,
  startPeer,
  startService
} from "./harness.js"

interface Run {
  readonly readyMs: number
  readonly rssMb: number
}

const coldStart = (ctx: BenchContext, side: "service" | "bare") =>
  Effect.scoped(
    Effect.gen(function* () {
      const devnet = yield* ctx.sharedDevnet
      const server =
        side === "service"
          ? yield* startService(ctx, serviceEnv(ctx, devnet, "startup"))
          : yield* startPeer(ctx, "bare", { DATABASE_URL: ctx.databaseUrl })
      yield* Effect.sleep(ctx.sizes.idleSettleMs)
      return { readyMs: server.readyMs, rssMb: server.rssMb() } satisfies Run
    })
  )

export const startupSection: Section = {
  name: "startup",
  about: "cold start to the first /health and idle RSS against a bare node:http + pg server",
  run: (ctx) =>
    Effect.gen(function* () {
      const runs = { service: [] as Array<Run>, bare: [] as Array<Run> }
      const first = yield* coldStart(ctx, "service")
      ctx.progress(`[startup] first start (not measured): ready in ${first.readyMs.toFixed(0)} ms`)
      for (let round = 0; round < ctx.sizes.rounds; round++) {
        for (const side of alternating(round, "service" as const, "bare" as const)) {
          const run = yield* coldStart(ctx, side)
          runs[side].push(run)
          ctx.progress(
            `[startup] round ${round + 1}/${ctx.sizes.rounds} ${side}: ready in ${run.readyMs.toFixed(0)} ms, ` +
              `idle RSS ${run.rssMb.toFixed(0)} MB`
          )
        }
      }
      const reference = "bare node:http + pg (connects before it listens), plain node"
      const row = (measure: string, pick: (run: Run) => number): RatioRow => ({
        measure,
        better: "lower",
        reference,
        service: runs.service.map(pick),
        peer: runs.bare.map(pick),
        errors: [0, 0]
      })
      return {
        ratios: [
          row("cold start: spawn to first 200 from /health, ms", (run) => run.readyMs),
          row(`idle RSS ${ctx.sizes.idleSettleMs / 1000} s after start, MB`, (run) => run.rssMb)
        ],
        counts: []
      }
    })
}
