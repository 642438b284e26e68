import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Option } from "effect"
import { Api } from "../Api.js"
import { ChainClient } from "../chain/ChainClient.js"
import { NotReady } from "../http/ApiError.js"
import { Merchant } from "../merchant/Merchant.js"

/** How long readiness waits on each dependency. */
const CHECK_TIMEOUT = "2 seconds"

/** "up", or why not, within CHECK_TIMEOUT. */
const probe = <A, E, R>(check: Effect.Effect<A, E, R>) =>
  check.pipe(
    Effect.timeout(CHECK_TIMEOUT),
    Effect.matchCause({
      onSuccess: () => "up",
      onFailure: (cause) =>
        Option.exists(Cause.failureOption(cause), Cause.isTimeoutException)
          ? `not answering within ${CHECK_TIMEOUT}`
          : "unreachable"
    })
  )

/**
 * The liveness answer, encoded once: the endpoint's declared body (`{"status":"ok"}`), handed to
 * the server as it is instead of being validated and serialised again on every probe.
 */
const healthy = HttpServerResponse.unsafeJson({ status: "ok" })

export const HealthHttpLive = HttpApiBuilder.group(Api, "health", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const chain = yield* ChainClient
    // Present when the merchant is on (App.ts): its settlements can say the relayer is stuck.
    const merchant = yield* Effect.serviceOption(Merchant)
    /** Why the relayer is stuck, if it is: a nonce gap left open, else settlements left without a receipt. */
    const relayerStuck = Effect.gen(function* () {
      const gap = yield* chain.relayerNonceTrouble
      if (Option.isSome(gap) || Option.isNone(merchant)) return gap
      return yield* merchant.value.stuckSettlements.pipe(
        Effect.timeout(CHECK_TIMEOUT),
        Effect.orElseSucceed(() => Option.none<string>())
      )
    })
    return handlers
      .handle("health", () => Effect.succeed(healthy))
      .handle("ready", () =>
        Effect.gen(function* () {
          const [database, chainState] = yield* Effect.all([probe(sql`SELECT 1`), probe(chain.blockTime)], {
            concurrency: 2
          })
          if (database !== "up" || chainState !== "up") {
            return yield* new NotReady({ error: `not ready: database ${database}, chain ${chainState}` })
          }
          const stuck = yield* relayerStuck
          if (Option.isSome(stuck)) return yield* new NotReady({ error: `not ready: relayer stuck: ${stuck.value}` })
          const chainEndpoints = (yield* chain.endpoints).map(({ endpoint, state, latencyMs, degraded }) => ({
            endpoint,
            state,
            ...(latencyMs === undefined ? {} : { latencyMs: Math.round(latencyMs) }),
            ...(degraded === undefined ? {} : { degraded })
          }))
          return { status: "ready" as const, database: "up" as const, chain: "up" as const, chainEndpoints }
        })
      )
  })
)
