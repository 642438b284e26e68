import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Option } from "effect"
import { Api } from "../Api.js"
import { ChainClient } from "../chain/ChainClient.js"
import { NotReady } from "../http/ApiError.js"
import { Readiness } from "./Readiness.js"

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
    const readiness = yield* Readiness
    /**
     * Why the service is not ready though its database and chain answer, if it is not: a relayer
     * nonce gap left open, else the first check of a part that is on (one that fails or does not
     * answer within CHECK_TIMEOUT is passed over: a slow check does not take the service out).
     */
    const notReady = Effect.gen(function* () {
      const gap = yield* chain.relayerNonceTrouble
      if (Option.isSome(gap)) return Option.some(`relayer stuck: ${gap.value}`)
      for (const check of yield* readiness.checks) {
        const why = yield* check.pipe(
          Effect.timeout(CHECK_TIMEOUT),
          Effect.orElseSucceed(() => Option.none<string>())
        )
        if (Option.isSome(why)) return why
      }
      return Option.none<string>()
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
          const why = yield* notReady
          if (Option.isSome(why)) return yield* new NotReady({ error: `not ready: ${why.value}` })
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
