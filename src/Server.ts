/**
 * The HTTP application: the API with every handler and domain service, the background loops, the
 * error normaliser, CORS, OpenAPI, the docs page, request ids and access logs. `httpLive` takes the
 * `HttpServer` layer (main.ts gives it a Node server on PORT, tests one on a free port) and requires
 * the ports (Ports.ts), the database and the configuration from outside.
 */
import { createServer } from "node:http"
import {
  FileSystem,
  HttpApiBuilder,
  HttpApiScalar,
  HttpApp,
  HttpIncomingMessage,
  HttpMiddleware,
  HttpServer,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { NodeHttpServer } from "@effect/platform-node"
import { Cause, Deferred, Duration, Effect, Layer, Option } from "effect"
import { AgentEnabledApi, Api, CoreApi, MerchantEnabledApi } from "./Api.js"
import { BadRequest, InternalError, NotFound, PayloadTooLarge } from "./ApiError.js"
import { Account } from "./account/Account.js"
import { AccountHttpLive } from "./account/Http.js"
import { Agent } from "./agent/Agent.js"
import { AgentLoop, AgentLoopLive } from "./agent/AgentLoop.js"
import { AgentHttpLive, StrategyHttpLive } from "./agent/Http.js"
import { Auth } from "./auth/Auth.js"
import { AuthHttpLive } from "./auth/Http.js"
import { AppConfig, type AppSettings, durationConfig } from "./Config.js"
import { Cards } from "./cards/Cards.js"
import { StatementHttpLive } from "./cards/Http.js"
import { Statement } from "./cards/Statement.js"
import { HealthHttpLive } from "./health/Http.js"
import { KycHttpLive, KycSandboxHttpLive, KycWebhookHttpLive } from "./kyc/Http.js"
import { Kyc } from "./kyc/Kyc.js"
import { KycConfig } from "./kyc/KycConfig.js"
import { SandboxDeskLive } from "./kyc/SandboxDesk.js"
import { MarketHttpLive } from "./market/Http.js"
import { Market, MarketRefreshLive } from "./market/Market.js"
import { MerchantHttpLive } from "./merchant/Http.js"
import { Merchant, SettlementReconcilerLive } from "./merchant/Merchant.js"
import { RateLimiter } from "./RateLimit.js"
import { ServerAddress } from "./ServerAddress.js"

const MAX_BODY_BYTES = 64 * 1024

const tagOf = (u: unknown): string | undefined =>
  typeof u === "object" && u !== null && "_tag" in u && typeof u._tag === "string" ? u._tag : undefined

interface DecodeIssue {
  readonly path: ReadonlyArray<PropertyKey>
  readonly message: string
}

/** "address: must be a 0x-prefixed 20-byte hex address; signature: is missing" */
const describeIssues = (issues: ReadonlyArray<DecodeIssue>, fallback: string) =>
  issues.length === 0
    ? fallback
    : issues
        .slice(0, 5)
        .map((issue) => `${issue.path.length > 0 ? issue.path.map(String).join(".") : "body"}: ${issue.message}`)
        .join("; ")

/**
 * HttpApi answers routing misses, malformed JSON, schema mismatches and defects with empty or
 * framework-shaped bodies; this turns each into the service's `{error, code}` errors.
 */
/** Paths of the parts that exist only when configured, and what switches them on. */
const switchedOff = (config: AppSettings): ReadonlyArray<readonly [RegExp, string]> => [
  ...(config.agentMode === "off"
    ? [
        [
          /^\/(portfolio|agent)(\/|$)/,
          "the agent is off: /portfolio and /agent/* exist with AGENT_MODE=dry or live"
        ] as const
      ]
    : []),
  ...(Option.isNone(config.merchantPayTo)
    ? [[/^\/merchant(\/|$)/, "the demo merchant is off: /merchant/* exists when MERCHANT_PAY_TO is set"] as const]
    : [])
]

const notFound = (request: HttpServerRequest.HttpServerRequest, off: ReturnType<typeof switchedOff>) => {
  const path = request.url.split("?")[0] ?? ""
  const reason = off.find(([pattern]) => pattern.test(path))?.[1]
  return new NotFound({ error: reason ?? `no route for ${request.method} ${path}` })
}

const ErrorNormalizerLive = HttpApiBuilder.middleware(
  Api,
  Effect.map(AppConfig, (config) => {
    const off = switchedOff(config)
    return (app) =>
      Effect.catchAllCause(
        app,
        (cause): Effect.Effect<never, BadRequest | NotFound | PayloadTooLarge | InternalError> => {
          if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
          const failure = Cause.failureOption(cause)
          if (Option.isSome(failure)) {
            const error: unknown = failure.value
            switch (tagOf(error)) {
              case "RouteNotFound":
                return Effect.fail(notFound((error as { request: HttpServerRequest.HttpServerRequest }).request, off))
              case "HttpApiDecodeError": {
                const decode = error as { message: string; issues: ReadonlyArray<DecodeIssue> }
                return Effect.fail(new BadRequest({ error: describeIssues(decode.issues, decode.message) }))
              }
              default:
                return Effect.failCause(cause)
            }
          }
          const defect = Cause.dieOption(cause)
          if (Option.isSome(defect) && tagOf(defect.value) === "RequestError") {
            const reason = String((defect.value as { cause?: unknown }).cause)
            return reason.includes("maxBytes exceeded")
              ? Effect.fail(new PayloadTooLarge({ error: `the request body exceeds ${MAX_BODY_BYTES} bytes` }))
              : Effect.fail(new BadRequest({ error: "the request body is not valid JSON" }))
          }
          return Effect.logError("unhandled defect", cause).pipe(
            Effect.zipRight(Effect.fail(new InternalError({ error: "internal server error" })))
          )
        }
      )
  })
)

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/

/**
 * Echoes a caller's `x-request-id` (or a fresh one) and tags the request's logs and span with it.
 * The response is written before a serve middleware returns, so the header goes on through a
 * pre-response handler.
 */
const withRequestId = HttpMiddleware.make((app) =>
  Effect.gen(function* () {
    const request = yield* HttpServerRequest.HttpServerRequest
    const given = request.headers["x-request-id"]
    const id = given !== undefined && REQUEST_ID.test(given) ? given : crypto.randomUUID()
    yield* Effect.annotateCurrentSpan("http.request.id", id)
    yield* HttpApp.appendPreResponseHandler((_request, response) =>
      Effect.succeed(HttpServerResponse.setHeader(response, "x-request-id", id))
    )
    // Refuse a declared oversize body before reading it; a chunked one is cut off while read.
    if (Number(request.headers["content-length"] ?? 0) > MAX_BODY_BYTES) {
      return HttpServerResponse.unsafeJson(
        { error: `the request body exceeds ${MAX_BODY_BYTES} bytes`, code: "PAYLOAD_TOO_LARGE" },
        { status: 413 }
      )
    }
    return yield* app.pipe(
      Effect.annotateLogs("requestId", id),
      HttpIncomingMessage.withMaxBodySize(Option.some(FileSystem.Size(MAX_BODY_BYTES)))
    )
  })
)

/** The domain services, each with its own repositories; the ports they use come from outside. */
const DomainLive = Layer.mergeAll(Account.Default, Agent.Default, AgentLoop.Default, RateLimiter.Default).pipe(
  Layer.provideMerge(Layer.mergeAll(Auth.Default, Kyc.Default, SandboxDeskLive, Statement.Default, Market.Default)),
  Layer.provideMerge(Cards.Default),
  Layer.provide(KycConfig.layer)
)

const CoreLive = Layer.mergeAll(
  HealthHttpLive,
  AuthHttpLive,
  AccountHttpLive,
  KycHttpLive,
  KycWebhookHttpLive,
  KycSandboxHttpLive,
  MarketHttpLive,
  StatementHttpLive,
  StrategyHttpLive,
  ErrorNormalizerLive,
  MarketRefreshLive
)

const MerchantLive = Layer.merge(MerchantHttpLive, SettlementReconcilerLive).pipe(Layer.provide(Merchant.Default))

/** The agent's endpoints and its loop, when `AGENT_MODE` is `dry` or `live`. */
const AgentLive = Layer.merge(AgentHttpLive, AgentLoopLive)

/** The API in force: the core, plus the merchant when `MERCHANT_PAY_TO` is set and the agent unless it is off. */
const ApiLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) => {
    const merchant = Option.isSome(config.merchantPayTo)
    const agent = config.agentMode !== "off"
    return merchant && agent
      ? HttpApiBuilder.api(Api).pipe(Layer.provide([MerchantLive, AgentLive]))
      : merchant
        ? HttpApiBuilder.api(MerchantEnabledApi).pipe(Layer.provide(MerchantLive))
        : agent
          ? HttpApiBuilder.api(AgentEnabledApi).pipe(Layer.provide(AgentLive))
          : HttpApiBuilder.api(CoreApi)
  })
).pipe(Layer.provide(CoreLive))

const CorsLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) =>
    HttpApiBuilder.middlewareCors({
      allowedOrigins: config.webOrigins,
      // The reference x402 client also sends Access-Control-Expose-Headers as a request header.
      allowedHeaders: [
        "authorization",
        "content-type",
        "payment-signature",
        "access-control-expose-headers",
        "x-request-id"
      ],
      exposedHeaders: ["payment-required", "payment-response", "x-request-id", "www-authenticate"],
      maxAge: 600
    })
  )
)

/** Tells the services that wait for it where the server listens. */
const AnnounceAddress = Layer.effectDiscard(
  Effect.gen(function* () {
    const server = yield* HttpServer.HttpServer
    yield* Deferred.succeed(yield* ServerAddress, server.address)
  })
)

/**
 * The HTTP application on the given server layer. The server is built last, so it starts
 * listening only once every service below it is ready: a connection accepted earlier would wait
 * for a handler that is not attached yet (and hold up shutdown).
 */
export const httpLive = <A, E, R>(server: Layer.Layer<A | HttpServer.HttpServer, E, R>) =>
  HttpApiBuilder.serve((app) => withRequestId(HttpMiddleware.logger(app))).pipe(
    HttpServer.withLogAddress,
    Layer.merge(AnnounceAddress),
    Layer.provideMerge(server),
    Layer.provide(HttpApiScalar.layer({ path: "/docs" })),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
    Layer.provide(CorsLive),
    Layer.provide(ApiLive),
    // The domain services are in the app's context too: tests and tools reach them (the agent loop's tick).
    Layer.provideMerge(DomainLive),
    Layer.provide(ServerAddress.layer)
  )

/**
 * The Node server on PORT. At shutdown it stops accepting and lets in-flight requests finish;
 * connections still open after SHUTDOWN_GRACE are cut, so a stuck client cannot hold the process.
 */
export const NodeServerLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const grace = yield* durationConfig("SHUTDOWN_GRACE", "10 seconds")
    const server = createServer()
    const deadline = Layer.scopedDiscard(
      // Registered after the server's own finalizer, so it runs first: it only arms the timer.
      Effect.addFinalizer(() =>
        Effect.sync(() => setTimeout(() => server.closeAllConnections(), Duration.toMillis(grace)).unref())
      )
    )
    return deadline.pipe(Layer.provideMerge(NodeHttpServer.layer(() => server, { port: config.port, host: "0.0.0.0" })))
  })
)
