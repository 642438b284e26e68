/**
 * Per-client request limits for the endpoints that create state for anonymous callers (sign-in
 * challenges and verifications, merchant orders). Counted in PostgreSQL in fixed one-minute
 * windows, so the limit holds across replicas. The client is the connection's address, or the
 * first `X-Forwarded-For` entry when `TRUST_PROXY=true` (only behind a proxy that sets it).
 */
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Config, Effect, Option } from "effect"
import { RateLimited } from "./ApiError.js"

const WINDOW_MS = 60_000

export type RateLimitName = "signin" | "orders"

const rateLimitSettings = Config.all({
  signin: Config.integer("RATE_LIMIT_SIGNIN").pipe(Config.withDefault(30)),
  orders: Config.integer("RATE_LIMIT_ORDERS").pipe(Config.withDefault(60)),
  trustProxy: Config.boolean("TRUST_PROXY").pipe(Config.withDefault(false))
})

export class RateLimiter extends Effect.Service<RateLimiter>()("app/RateLimiter", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const settings = yield* rateLimitSettings

    const clientOf = (request: HttpServerRequest.HttpServerRequest) => {
      const forwarded = request.headers["x-forwarded-for"]?.split(",")[0]?.trim()
      if (settings.trustProxy && forwarded !== undefined && forwarded !== "") return forwarded
      return Option.getOrElse(request.remoteAddress, () => "unknown")
    }

    /** Counts one request of the current client against `name`; fails with 429 past the limit. */
    const consume = Effect.fn("RateLimiter.consume")(function* (name: RateLimitName) {
      const request = yield* HttpServerRequest.HttpServerRequest
      const now = yield* Clock.currentTimeMillis
      const windowStart = new Date(Math.floor(now / WINDOW_MS) * WINDOW_MS)
      const bucket = `${name}:${clientOf(request)}`
      const [row] = yield* sql<{ hits: number }>`
        INSERT INTO rate_limit_hits (bucket, window_start, hits) VALUES (${bucket}, ${windowStart}, 1)
        ON CONFLICT (bucket, window_start) DO UPDATE SET hits = rate_limit_hits.hits + 1
        RETURNING hits`.pipe(Effect.orDie)
      // The first hit of a window also clears windows long gone, keeping the table small.
      if (row?.hits === 1) {
        yield* sql`DELETE FROM rate_limit_hits WHERE window_start < ${new Date(now - 10 * WINDOW_MS)}`.pipe(
          Effect.orDie
        )
      }
      if ((row?.hits ?? 0) > settings[name]) {
        const retryAfter = Math.ceil((windowStart.getTime() + WINDOW_MS - now) / 1000)
        yield* HttpApp.appendPreResponseHandler((_request, response) =>
          Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(retryAfter)))
        )
        return yield* new RateLimited({ error: `too many requests; retry in ${retryAfter} s` })
      }
    })

    return { consume }
  })
}) {}
