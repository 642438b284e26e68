/**
 * CORS headers as @effect/platform's `HttpMiddleware.cors` answers them for the same options (no
 * credentials, its default methods), computed by the request pipeline in its own step (Server.ts)
 * instead of by that middleware: a middleware of its own cost every request a fibre step, a
 * FiberRef update and a pre-response handler, ~16% of the CPU of a `/health` request
 * (docs/performance.md, issue 27's third pass).
 */
import { Headers, HttpServerResponse } from "@effect/platform"

export interface CorsOptions {
  /** Origins allowed to read answers: one is always named, several are echoed when they match, none is `*`. */
  readonly allowedOrigins: ReadonlyArray<string>
  readonly allowedHeaders: ReadonlyArray<string>
  readonly exposedHeaders: ReadonlyArray<string>
  readonly maxAgeSeconds: number
}

/** The platform middleware's default methods. */
const ALLOWED_METHODS = ["GET", "HEAD", "PUT", "PATCH", "POST", "DELETE"].join(", ")

export const cors = (options: CorsOptions) => {
  const { allowedOrigins } = options
  const allowOrigin: (origin: string | undefined) => Record<string, string> | undefined =
    allowedOrigins.length === 0
      ? () => ({ "access-control-allow-origin": "*" })
      : allowedOrigins.length === 1
        ? () => ({ "access-control-allow-origin": allowedOrigins[0]!, vary: "Origin" })
        : (origin) =>
            origin !== undefined && allowedOrigins.includes(origin)
              ? { "access-control-allow-origin": origin, vary: "Origin" }
              : undefined
  const exposeHeaders =
    options.exposedHeaders.length > 0
      ? { "access-control-expose-headers": options.exposedHeaders.join(",") }
      : undefined
  const allowHeaders = (requested: string | undefined) =>
    options.allowedHeaders.length === 0 && requested
      ? { vary: "Access-Control-Request-Headers", "access-control-allow-headers": requested }
      : { "access-control-allow-headers": options.allowedHeaders.join(",") }
  const maxAge = options.maxAgeSeconds > 0 ? { "access-control-max-age": String(options.maxAgeSeconds) } : undefined
  // With at most one allowed origin, what an answer carries does not depend on the request: made once.
  const fixedHeaders = allowedOrigins.length <= 1 ? { ...allowOrigin(undefined), ...exposeHeaders } : undefined
  return {
    /** What an answer to any request but a preflight carries (not to be changed: it may be shared). */
    headers: (origin: string | undefined): Readonly<Record<string, string>> =>
      fixedHeaders ?? { ...allowOrigin(origin), ...exposeHeaders },
    /** The whole answer to a preflight (any OPTIONS request): 204 and what it allows. */
    preflight: (origin: string | undefined, requestedHeaders: string | undefined) =>
      HttpServerResponse.empty({
        status: 204,
        headers: Headers.unsafeFromRecord({
          ...allowOrigin(origin),
          ...exposeHeaders,
          "access-control-allow-methods": ALLOWED_METHODS,
          ...allowHeaders(requestedHeaders),
          ...maxAge
        })
      })
  }
}
