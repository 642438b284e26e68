/**
 * (b) read one order and (c) /health: autocannon with 10 keep-alive connections, run from this
 * process, against the service and against the bare `node:http` (+ `pg`) peer on the same
 * database. Each measured run follows a short warm-up run on the same server.
 */
import autocannon from "autocannon"
import { Effect } from "effect"
import { alternating, type RatioRow, type Section, type ServerProcess } from "./harness.js"
import { createOrder } from "./pay.js"

const CONNECTIONS = 10

interface LoadRun {
  readonly perSecond: number
  readonly cpuPerRequestUs: number
  readonly failures: number
}

const load = (server: ServerProcess, url: string, seconds: number) =>
  Effect.promise(async (): Promise<LoadRun> => {
    const cpuBefore = server.cpuMs()
    const result = await autocannon({ url, connections: CONNECTIONS, duration: seconds })
    const cpu = server.cpuMs() - cpuBefore
    const ok = result["2xx"]
    return {
      perSecond: ok / result.duration,
      cpuPerRequestUs: (cpu * 1000) / ok,
      failures: result.non2xx + result.errors
    }
  })

const loadSection = (options: {
  readonly name: string
  readonly about: string
  readonly flow: string
  readonly reference: string
  /** The path to load on both servers. */
  readonly path: (service: ServerProcess) => Effect.Effect<string>
}): Section => ({
  name: options.name,
  about: options.about,
  run: (ctx) =>
    Effect.gen(function* () {
      const service = yield* ctx.sharedService
      const bare = yield* ctx.sharedBare
      const path = yield* options.path(service)
      const runs = { service: [] as Array<LoadRun>, bare: [] as Array<LoadRun> }
      for (let round = 0; round < ctx.sizes.rounds; round++) {
        for (const side of alternating(round, "service" as const, "bare" as const)) {
          const server = side === "service" ? service : bare
          const warm = round === 0 ? ctx.sizes.primeSeconds : ctx.sizes.warmSeconds
          yield* load(server, `${server.baseUrl}${path}`, warm)
          const run = yield* load(server, `${server.baseUrl}${path}`, ctx.sizes.loadSeconds)
          runs[side].push(run)
          ctx.progress(
            `[${options.name}] round ${round + 1}/${ctx.sizes.rounds} ${side}: ${run.perSecond.toFixed(0)} req/s, ` +
              `CPU ${run.cpuPerRequestUs.toFixed(0)} µs/request, ${run.failures} failed`
          )
        }
      }
      const errors = [runs.service, runs.bare].map((list) => list.reduce((sum, run) => sum + run.failures, 0)) as [
        number,
        number
      ]
      const row = (measure: string, better: RatioRow["better"], pick: (run: LoadRun) => number): RatioRow => ({
        measure: `${options.flow}: ${measure}`,
        better,
        reference: options.reference,
        service: runs.service.map(pick),
        peer: runs.bare.map(pick),
        errors
      })
      return {
        ratios: [
          row("requests/s", "higher", (run) => run.perSecond),
          row("server CPU per request, µs", "lower", (run) => run.cpuPerRequestUs)
        ],
        counts: []
      }
    })
})

export const readSection = loadSection({
  name: "read",
  about: "GET /merchant/orders/{id} against a bare node:http + pg server doing the same SELECT",
  flow: `read one order, GET /merchant/orders/{id}, ${CONNECTIONS} connections`,
  reference: "bare node:http + pg, same SELECT on the same database",
  path: (service) =>
    Effect.promise(() => createOrder(service.baseUrl)).pipe(Effect.map(({ id }) => `/merchant/orders/${id}`))
})

export const healthSection = loadSection({
  name: "health",
  about: "GET /health against a bare node:http server answering a constant JSON",
  flow: `GET /health, ${CONNECTIONS} connections`,
  reference: "bare node:http answering a constant JSON",
  path: () => Effect.succeed("/health")
})
