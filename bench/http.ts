/**
 * (b) read one order, (c) /health and (f) `GET /me`: autocannon with 10 keep-alive connections, run
 * from this process. The read is measured against the bare `node:http` + `pg` peer and the Fastify +
 * `pg` peer on the same database, /health against the bare peer, both also against the stack's floor
 * (peers/effectFloor.ts: the design card's stack as its documentation writes it, nothing of ours),
 * `GET /me` (a signed-in user's bearer) against the same service's own read. Each measured run follows a short warm-up run on
 * the same server; the order of the sides turns each round.
 */
import autocannon from "autocannon"
import { Effect, type Scope } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import {
  type BenchContext,
  expectJson,
  postJson,
  type RatioRow,
  type Section,
  type ServerProcess,
  startPeer
} from "./harness.js"
import { createOrder } from "./pay.js"

const CONNECTIONS = 10
/** The stack's floor (peers/effectFloor.ts): says how much of a gap to the bare server is the stack's own. */
const FLOOR = "the stack's floor: a bare HttpApi + @effect/sql-pg server"

interface LoadRun {
  readonly perSecond: number
  readonly cpuPerRequestUs: number
  readonly failures: number
}

/** One server and the request loaded on it. */
interface Side {
  readonly server: ServerProcess
  readonly path: string
  readonly headers?: Record<string, string>
  /** How the ratio table names a reference side. */
  readonly label: string
}

const load = (side: Side, seconds: number) =>
  Effect.promise(async (): Promise<LoadRun> => {
    const cpuBefore = side.server.cpuMs()
    const result = await autocannon({
      url: `${side.server.baseUrl}${side.path}`,
      headers: side.headers ?? {},
      connections: CONNECTIONS,
      duration: seconds
    })
    const cpu = side.server.cpuMs() - cpuBefore
    const ok = result["2xx"]
    return {
      perSecond: ok / result.duration,
      cpuPerRequestUs: (cpu * 1000) / ok,
      failures: result.non2xx + result.errors
    }
  })

/** Round `round`'s order of the sides: each goes first in turn. */
const rotated = <A>(round: number, sides: ReadonlyArray<A>) => sides.map((_, i) => sides[(i + round) % sides.length]!)

const loadSection = (options: {
  readonly name: string
  readonly about: string
  readonly flow: string
  /** The service's side first, then the references it is compared with. */
  readonly sides: (ctx: BenchContext) => Effect.Effect<readonly [Side, ...ReadonlyArray<Side>], Error, Scope.Scope>
}): Section => ({
  name: options.name,
  about: options.about,
  run: (ctx) =>
    Effect.gen(function* () {
      const sides = yield* options.sides(ctx)
      const runs = sides.map(() => [] as Array<LoadRun>)
      for (let round = 0; round < ctx.sizes.rounds; round++) {
        for (const index of rotated(
          round,
          sides.map((_, i) => i)
        )) {
          const side = sides[index]!
          yield* load(side, round === 0 ? ctx.sizes.primeSeconds : ctx.sizes.warmSeconds)
          const run = yield* load(side, ctx.sizes.loadSeconds)
          runs[index]!.push(run)
          ctx.progress(
            `[${options.name}] round ${round + 1}/${ctx.sizes.rounds} ${index === 0 ? "service" : side.label}: ` +
              `${run.perSecond.toFixed(0)} req/s, CPU ${run.cpuPerRequestUs.toFixed(0)} µs/request, ${run.failures} failed`
          )
        }
      }
      const failures = (list: ReadonlyArray<LoadRun>) => list.reduce((sum, run) => sum + run.failures, 0)
      const ratios = sides.slice(1).flatMap((reference, i) => {
        const row = (measure: string, better: RatioRow["better"], pick: (run: LoadRun) => number): RatioRow => ({
          measure: `${options.flow}: ${measure}`,
          better,
          reference: reference.label,
          service: runs[0]!.map(pick),
          peer: runs[i + 1]!.map(pick),
          errors: [failures(runs[0]!), failures(runs[i + 1]!)]
        })
        return [
          row("requests/s", "higher", (run) => run.perSecond),
          row("server CPU per request, µs", "lower", (run) => run.cpuPerRequestUs)
        ]
      })
      return { ratios, counts: [] }
    })
})

const orderPath = (service: ServerProcess) =>
  Effect.promise(() => createOrder(service.baseUrl)).pipe(Effect.map(({ id }) => `/merchant/orders/${id}`))

export const readSection = loadSection({
  name: "read",
  about: "GET /merchant/orders/{id} against bare node:http + pg and Fastify + pg doing the same SELECT",
  flow: `read one order, GET /merchant/orders/{id}, ${CONNECTIONS} connections`,
  sides: (ctx) =>
    Effect.gen(function* () {
      const service = yield* ctx.sharedService
      const bare = yield* ctx.sharedBare
      const fastify = yield* startPeer(ctx, "fastify", { DATABASE_URL: ctx.databaseUrl })
      const floor = yield* ctx.sharedFloor
      const path = yield* orderPath(service)
      return [
        { server: service, path, label: "the service" },
        { server: bare, path, label: "bare node:http + pg, same SELECT on the same database" },
        { server: fastify, path, label: "Fastify 5.12 + pg, same SELECT on the same database" },
        { server: floor, path, label: `${FLOOR}, same SELECT` }
      ] as const
    })
})

export const healthSection = loadSection({
  name: "health",
  about: "GET /health against a bare node:http server answering a constant JSON",
  flow: `GET /health, ${CONNECTIONS} connections`,
  sides: (ctx) =>
    Effect.gen(function* () {
      const service = yield* ctx.sharedService
      const bare = yield* ctx.sharedBare
      const floor = yield* ctx.sharedFloor
      return [
        { server: service, path: "/health", label: "the service" },
        { server: bare, path: "/health", label: "bare node:http answering a constant JSON" },
        { server: floor, path: "/health", label: `${FLOOR} answering a constant JSON` }
      ] as const
    })
})

/** A fresh user's bearer token (no identity check, no card: what a new card holder's app polls). */
export const bearerOf = async (baseUrl: string) => {
  const account = privateKeyToAccount(generatePrivateKey())
  const { message } = await expectJson<{ message: string }>(
    await postJson(`${baseUrl}/auth/challenge`, { address: account.address })
  )
  const signature = await account.signMessage({ message })
  const { token } = await expectJson<{ token: string }>(
    await postJson(`${baseUrl}/auth/verify`, { message, signature })
  )
  return token
}

export const meSection = loadSection({
  name: "me",
  about: "GET /me (bearer) against the same service's read of one order",
  flow: `GET /me (bearer), ${CONNECTIONS} connections`,
  sides: (ctx) =>
    Effect.gen(function* () {
      const service = yield* ctx.sharedService
      const token = yield* Effect.promise(() => bearerOf(service.baseUrl))
      return [
        { server: service, path: "/me", headers: { authorization: `Bearer ${token}` }, label: "the service" },
        { server: service, path: yield* orderPath(service), label: "the same service reading one order" }
      ] as const
    })
})
