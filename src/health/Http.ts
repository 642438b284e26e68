import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Option } from "effect"
import { Api } from "../Api.js"
import { ChainClient } from "../chain/ChainClient.js"
import { NotReady } from "../http/ApiError.js"

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
          return { status: "ready" as const, database: "up" as const, chain: "up" as const }
        })
      )
  })
)
