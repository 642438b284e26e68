/** `GET /metrics`: who may read the metrics (observability/Metrics.ts renders them). */
import { createHash, timingSafeEqual } from "node:crypto"
import { HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Config, Effect, Option, Redacted } from "effect"
import { metricsScrape } from "../observability/Metrics.js"
import type { DatabasePool } from "../storage/Database.js"
import { NotFound, Unauthorized } from "./ApiError.js"

/** The bearer token a scraper must send; unset, only loopback clients are served. */
const metricsToken = Config.option(
  Config.redacted("METRICS_TOKEN").pipe(
    Config.validate({
      message: "Expected METRICS_TOKEN to be at least 16 characters",
      validation: (token) => Redacted.value(token).length >= 16
    })
  )
)

/** The connection's own peer (never X-Forwarded-For) is this machine. */
const fromLoopback = (request: HttpServerRequest.HttpServerRequest) =>
  Option.exists(request.remoteAddress, (address) => /^(127\.|::1$|::ffff:127\.)/.test(address))

const digest = (text: string) => createHash("sha256").update(text, "utf8").digest()

/** `Authorization: Bearer <token>`, compared in constant time. */
const bearerIs = (header: string | undefined, token: Redacted.Redacted<string>) =>
  header !== undefined && timingSafeEqual(digest(header), digest(`Bearer ${Redacted.value(token)}`))

/**
 * `GET /metrics`. With `METRICS_TOKEN` set, a scraper sends it as a bearer token (401 otherwise,
 * from anywhere); without it the metrics are served only to clients on this machine (the
 * connection's peer is loopback) and are a 404 to anyone else: counters of settlements and
 * identity checks are nobody else's business.
 */
export const metricsRoute = (pool: Pick<DatabasePool["Type"], "usage">) =>
  Effect.map(metricsToken, (token) => {
    const metrics = Effect.map(metricsScrape(pool), (text) =>
      HttpServerResponse.text(text, { contentType: "text/plain; version=0.0.4; charset=utf-8" })
    )
    return Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      if (Option.isSome(token)) {
        return bearerIs(request.headers.authorization, token.value)
          ? metrics
          : Effect.succeed(
              HttpServerResponse.unsafeJson(
                { error: "/metrics needs the METRICS_TOKEN bearer token", code: Unauthorized.code },
                { status: Unauthorized.status, headers: { "www-authenticate": 'Bearer realm="metrics"' } }
              )
            )
      }
      return fromLoopback(request)
        ? metrics
        : Effect.succeed(
            HttpServerResponse.unsafeJson(
              { error: "/metrics is served to this machine only while METRICS_TOKEN is unset", code: NotFound.code },
              { status: NotFound.status }
            )
          )
    })
  })
