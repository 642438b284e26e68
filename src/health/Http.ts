import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Cause, Duration, Effect, Option } from "effect"
import { Api } from "../Api.js"
import { ChainClient } from "../chain/ChainClient.js"
import { NotReady } from "../http/ApiError.js"
import { durationConfig } from "../runtime/Config.js"

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
    /** A settlement unfinished this long means a stuck relayer (a nonce gap, a transaction never mined). */
    const stuckAfter = yield* durationConfig("SETTLEMENT_STUCK_AFTER", "2 minutes")
    const stuckSettlements = sql<{ readonly stuck: number }>`
      SELECT count(*)::int AS stuck FROM settlements
      WHERE status IN ('pending', 'broadcast')
        AND created_at < now() - make_interval(secs => ${Duration.toSeconds(stuckAfter)})`.pipe(
      Effect.map((rows) => rows[0]?.stuck ?? 0),
      Effect.timeout(CHECK_TIMEOUT),
      Effect.orElseSucceed(() => 0)
    )
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
          const stuck = yield* stuckSettlements
          if (stuck > 0) {
            return yield* new NotReady({
              error: `not ready: relayer stuck: ${stuck} settlement(s) without a receipt for over ${Duration.format(stuckAfter)}`
            })
          }
          const chainEndpoints = (yield* chain.endpoints).map(({ endpoint, state, latencyMs }) =>
            latencyMs === undefined ? { endpoint, state } : { endpoint, state, latencyMs: Math.round(latencyMs) }
          )
          return { status: "ready" as const, database: "up" as const, chain: "up" as const, chainEndpoints }
        })
      )
  })
)
