import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Cause, Effect, Option } from "effect"
import { Api } from "../Api.js"
import { NotReady } from "../ApiError.js"
import { ChainClient } from "../chain/ChainClient.js"

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

export const HealthHttpLive = HttpApiBuilder.group(Api, "health", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const chain = yield* ChainClient
    return handlers
      .handle("health", () => Effect.succeed({ status: "ok" as const }))
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
