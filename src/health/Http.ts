import { HttpApiBuilder } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Effect } from "effect"
import { Api } from "../Api.js"
import { NotReady } from "../ApiError.js"

export const HealthHttpLive = HttpApiBuilder.group(Api, "health", (handlers) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const notReady = new NotReady({ error: "the database is unreachable" })
    return handlers
      .handle("health", () => Effect.succeed({ status: "ok" as const }))
      .handle("ready", () =>
        sql`SELECT 1`.pipe(
          Effect.timeoutFail({ duration: "2 seconds", onTimeout: () => notReady }),
          Effect.catchTag("SqlError", () => notReady),
          Effect.as({ status: "ready" as const })
        )
      )
  })
)
