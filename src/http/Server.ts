/**
 * The HTTP server in front of any API: the request pipeline (request ids, body checks, metrics,
 * access logs, response headers), the error normaliser, and the Node server with its limits.
 * It knows no domain: the app (App.ts) hands it the API to serve. One file because the pipeline
 * and the Node server are two halves of one front door: both refuse what no handler should see,
 * with the same `{error, code}` bodies, `nosniff` and message bounds.
 */
import { createServer, type IncomingMessage, type ServerResponse, STATUS_CODES } from "node:http"
import type { Duplex } from "node:stream"
import {
  FileSystem,
  type HttpApi,
  HttpApiBuilder,
  type HttpApiGroup,
  HttpApp,
  HttpIncomingMessage,
  HttpMethod,
  HttpMiddleware,
  HttpServer,
  HttpServerRequest,
  HttpServerResponse
} from "@effect/platform"
import { NodeHttpServer, NodeHttpServerRequest } from "@effect/platform-node"
import {
  Cause,
  Config,
  ConfigError,
  Context,
  Duration,
  Effect,
  Either,
  Exit,
  type FiberId,
  FiberRef,
  HashMap,
  HashSet,
  Layer,
  LogLevel,
  Option
} from "effect"
import { describeError } from "../observability/ErrorLine.js"
import { jsonLineLogger, writeLogLine } from "../observability/LogSink.js"
import { requestMetrics, routeTemplates, statusOfExit } from "../observability/Metrics.js"
import { reportUnavailable } from "../observability/Outages.js"
import { AppConfig, durationConfig } from "../runtime/Config.js"
import { isDatabaseUnavailable } from "../storage/Sql.js"
import {
  BadRequest,
  type ChainUnavailable,
  DatabaseUnavailable,
  HeadersTooLarge,
  InternalError,
  NotFound,
  PayloadTooLarge,
  RequestTimeout,
  UnsupportedMediaType
} from "./ApiError.js"
import { type CorsOptions, cors } from "./Cors.js"
import type { SwitchedOff } from "./Feature.js"
import { NOSNIFF, scriptedPageCsp } from "./PageSecurity.js"
import {
  announcesBody,
  type BodyKind,
  bodyKind,
  jsonDeeperThan,
  MAX_BODY_BYTES,
  MAX_JSON_DEPTH,
  MEDIA_TYPES,
  payloadKinds,
  readBody,
  unstorableText,
  withReadBody
} from "./RequestBody.js"

/** Longest error message sent back: a message never echoes a large input. */
const MAX_MESSAGE_LENGTH = 300
/** What every 503 tells the client to wait before retrying, in seconds. */
const RETRY_AFTER_SECONDS = 2
/** Request line and headers, as Node's parser counts them (its default, set deliberately). */
const MAX_HEADER_BYTES = 16 * 1024

const truncated = (text: string, length = MAX_MESSAGE_LENGTH) =>
  text.length <= length ? text : `${text.slice(0, length - 1)}…`

const tagOf = (u: unknown): string | undefined =>
  typeof u === "object" && u !== null && "_tag" in u && typeof u._tag === "string" ? u._tag : undefined

/**
 * A decode failure's message: the request schemas write theirs field by field (`withFieldMessages`),
 * each part (body, path, query, headers) as one issue.
 */
const decodeMessage = (issues: ReadonlyArray<{ readonly message: string }>) =>
  truncated(issues.map((issue) => issue.message).join("; "), MAX_MESSAGE_LENGTH * 2)

const notFound = (request: HttpServerRequest.HttpServerRequest, off: ReadonlyArray<SwitchedOff>) => {
  const path = request.url.split("?")[0] ?? ""
  const under = (prefix: string) => path === prefix || path.startsWith(`${prefix}/`)
  const reason = off.find(({ paths }) => paths.some(under))?.message
  return new NotFound({ error: reason ?? truncated(`no route for ${request.method} ${path}`) })
}

/**
 * HttpApi answers routing misses, schema mismatches and defects with empty or framework-shaped
 * bodies; this turns each into the service's `{error, code}` errors. A database that cannot answer
 * (the repositories die with its error) is 503 DATABASE_UNAVAILABLE, any other defect 500. A
 * routing miss under a part that is switched off (`off`: http/Feature.ts) says how to switch it on.
 */
export const normalizeErrors = (off: ReadonlyArray<SwitchedOff>) => (app: HttpApp.Default) =>
  Effect.catchAllCause(
    app,
    (cause): Effect.Effect<never, BadRequest | NotFound | DatabaseUnavailable | InternalError> => {
      if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
      const failure = Cause.failureOption(cause)
      if (Option.isSome(failure)) {
        const error: unknown = failure.value
        switch (tagOf(error)) {
          case "RouteNotFound":
            return Effect.fail(notFound((error as { request: HttpServerRequest.HttpServerRequest }).request, off))
          case "HttpApiDecodeError": {
            const { issues } = error as { issues: ReadonlyArray<{ readonly message: string }> }
            return Effect.fail(new BadRequest({ error: decodeMessage(issues) }))
          }
          case "ChainUnavailable":
            return Effect.zipRight(
              reportUnavailable("chain", (error as ChainUnavailable).error, "request"),
              Effect.failCause(cause)
            )
          default:
            if (!isDatabaseUnavailable(error)) return Effect.failCause(cause)
        }
      }
      const fault = Option.orElse(Cause.dieOption(cause), () => failure)
      if (Option.isSome(fault) && isDatabaseUnavailable(fault.value)) {
        // counted in the outage, not logged per request (Outages.ts)
        return reportUnavailable("database", describeError(fault.value), "request").pipe(
          Effect.zipRight(Effect.fail(new DatabaseUnavailable({ error: "the database did not answer in time" })))
        )
      }
      if (Option.isSome(fault) && tagOf(fault.value) === "RequestError") {
        // The body was read and checked before routing; only a broken connection gets here.
        return Effect.fail(new BadRequest({ error: "the request body could not be read" }))
      }
      return Effect.logError("unhandled defect", cause).pipe(
        Effect.zipRight(Effect.fail(new InternalError({ error: "internal server error" })))
      )
    }
  )

/** What the pipeline reads of the API it serves: each request's route template and the body kind it takes. */
interface Routes {
  readonly routeOf: (method: string, url: string) => string
  readonly payloadKindOf: ReadonlyMap<string, BodyKind>
}

class ApiRoutes extends Context.Tag("http/ApiRoutes")<ApiRoutes, Routes>() {}

const REQUEST_ID = /^[A-Za-z0-9._-]{1,128}$/

/** A `{error, code}` response written before routing, for one of the declared errors. */
const refusal = (error: { readonly code: string; readonly status: number }, message: string) =>
  HttpServerResponse.unsafeJson({ error: truncated(message), code: error.code }, { status: error.status })

const tooLarge = () => refusal(PayloadTooLarge, `the request body exceeds ${MAX_BODY_BYTES} bytes`)

/** What a body of the wrong kind is told: the type its endpoint reads. */
const unsupportedMediaType = (contentType: string | undefined, expected: BodyKind) =>
  refusal(
    UnsupportedMediaType,
    contentType === undefined
      ? `the request body has no content-type: send content-type: ${MEDIA_TYPES[expected]}`
      : `content-type ${contentType} is not accepted here: send content-type: ${MEDIA_TYPES[expected]}`
  )

/**
 * Reads a request's body once and checks it before any handler: 415 unless its content type is the
 * one its endpoint reads (JSON, or the sandbox page's URL-encoded form; a body with no content type
 * is not guessed at), 413 past the size limit however the body is framed, 400 for JSON nested
 * deeper than MAX_JSON_DEPTH (checked on the text, before parsing), for JSON that does not parse,
 * and for text PostgreSQL cannot store (the message names the field). Handlers then read it from
 * memory. A body sent to an endpoint that reads none (or to no endpoint) is read under the size
 * limit and otherwise ignored.
 */
const withCheckedBody = <E, R>(
  request: HttpServerRequest.HttpServerRequest,
  app: HttpApp.Default<E, R>,
  routes: Routes
): HttpApp.Default<E, R> => {
  const source = NodeHttpServerRequest.toIncomingMessage(request)
  if (source.httpVersion === "1.1" && request.headers.host === undefined) {
    return Effect.succeed(refusal(BadRequest, "an HTTP/1.1 request needs a Host header"))
  }
  // Most requests carry no body: they go straight to the app, without a generator step of their own.
  if (!HttpMethod.hasBody(request.method) || !announcesBody(request.headers)) return app
  return readAndCheckBody(request, source, app, routes)
}

const readAndCheckBody = <E, R>(
  request: HttpServerRequest.HttpServerRequest,
  source: IncomingMessage,
  app: HttpApp.Default<E, R>,
  { payloadKindOf, routeOf }: Routes
) =>
  Effect.gen(function* () {
    const expected = payloadKindOf.get(`${request.method} ${routeOf(request.method, request.url)}`)
    const contentType = request.headers["content-type"]
    if (expected !== undefined && Option.getOrUndefined(bodyKind(contentType)) !== expected) {
      return unsupportedMediaType(contentType, expected)
    }
    if (Number(request.headers["content-length"] ?? 0) > MAX_BODY_BYTES) return tooLarge()
    const read = yield* readBody(source, MAX_BODY_BYTES)
    if (read._tag === "TooLarge") return tooLarge()
    if (read._tag === "Broken") return refusal(BadRequest, "the request body could not be read")
    const text = Buffer.from(read.bytes).toString("utf8")
    let parsed: unknown
    if (expected === "json") {
      if (jsonDeeperThan(text, MAX_JSON_DEPTH)) {
        return refusal(BadRequest, `the request body nests arrays or objects deeper than ${MAX_JSON_DEPTH} levels`)
      }
      // An empty body reads as null, as HttpApi reads it.
      const json = Either.try(() => (text === "" ? null : (JSON.parse(text) as unknown)))
      if (Either.isLeft(json)) return refusal(BadRequest, "the request body is not valid JSON")
      parsed = json.right
    } else if (expected === "form") {
      parsed = Object.fromEntries(new URLSearchParams(text))
    }
    const unstorable = unstorableText(parsed)
    if (Option.isSome(unstorable)) return refusal(BadRequest, unstorable.value)
    return yield* Effect.provideService(
      app,
      HttpServerRequest.HttpServerRequest,
      withReadBody(request, {
        bytes: read.bytes,
        text,
        json: expected === "json" ? Option.some(parsed) : Option.none()
      })
    )
  })

/**
 * The strict CSP of an HTML page that brings none of its own (/docs): its inline scripts allowed by
 * hash (`scriptedPageCsp`), computed once per page body (a page's response is built once).
 */
const pagePolicies = (apiUrl: string) => {
  const known = new WeakMap<object, string>()
  const connectTo = [new URL(apiUrl).origin]
  return (response: HttpServerResponse.HttpServerResponse): string | undefined => {
    const { body } = response
    if (
      body._tag !== "Uint8Array" ||
      !body.contentType.startsWith("text/html") ||
      response.headers["content-security-policy"] !== undefined
    ) {
      return undefined
    }
    let policy = known.get(body.body)
    if (policy === undefined) {
      policy = scriptedPageCsp(Buffer.from(body.body).toString("utf8"), connectTo)
      known.set(body.body, policy)
    }
    return policy
  }
}

/**
 * What every response carries: its request id, `nosniff`, a 503's `Retry-After`, an HTML page's CSP,
 * `Cache-Control: no-store` unless it says otherwise (the API's answers carry card data, tokens and
 * personal data: no cache may keep any of them, and a new endpoint cannot forget it; the web app's
 * assets say their own); and `extra` (the app's CORS headers). One record, set in one step: this
 * runs on every answer.
 */
const answerHeaders = (
  response: HttpServerResponse.HttpServerResponse,
  id: string,
  pagePolicy: string | undefined,
  extra?: Record<string, string>
) => {
  const headers: Record<string, string> = { "x-request-id": id, ...NOSNIFF }
  if (response.headers["cache-control"] === undefined) headers["cache-control"] = "no-store"
  if (response.status === 503 && response.headers["retry-after"] === undefined) {
    headers["retry-after"] = String(RETRY_AFTER_SECONDS)
  }
  if (pagePolicy !== undefined) headers["content-security-policy"] = pagePolicy
  return HttpServerResponse.setHeaders(response, extra === undefined ? headers : Object.assign(headers, extra))
}

/**
 * The access-log line of a request, as the JSON logger would write it, built without the logger.
 * The method (a token Node's parser accepted) and the id (`REQUEST_ID` or a UUID) need no escaping.
 */
const accessLine = (method: string, url: string, status: number, id: string, fiber: FiberId.Runtime) =>
  `{"message":"Sent HTTP response","logLevel":"INFO","timestamp":"${new Date().toISOString()}",` +
  `"annotations":{"http.method":"${method}","http.url":${JSON.stringify(url)},` +
  `"http.status":${status},"requestId":"${id}"},"spans":{},"fiberId":"#${fiber.id}"}`

/**
 * The request pipeline in front of the API, in one step (each middleware layer costs every request
 * fibre-runtime steps and allocations): echoes a caller's `x-request-id` (or a fresh one) on the
 * response and tags the request's logs (and span, when tracing) with it, gives every 503 a
 * `Retry-After`, checks the body (`withCheckedBody`), answers CORS (Cors.ts: a preflight, and the
 * same headers on every other answer, set in one place), counts and times the request
 * (`requestMetrics`) and writes its access-log line. It wraps the API before the server writes the
 * response, so headers go on the response itself; only an app failure (the client gone, a cause
 * nothing encoded) takes a pre-response handler. With the JSON logger the access line is written
 * to the log batch directly (the Effect logger's per-line work was most of a request's logging
 * cost); under a minimum level above Info it is not built at all.
 */
const makeRequestPipeline = (corsOptions: CorsOptions) =>
  Effect.gen(function* () {
    const routes = yield* ApiRoutes
    const { routeOf } = routes
    const tracing = yield* FiberRef.get(FiberRef.currentTracerEnabled)
    const logged = LogLevel.greaterThanEqual(LogLevel.Info, yield* FiberRef.get(FiberRef.currentMinimumLogLevel))
    const direct = logged && HashSet.has(yield* FiberRef.get(FiberRef.currentLoggers), jsonLineLogger)
    const record = requestMetrics(routeOf)
    const pagePolicy = pagePolicies((yield* AppConfig).apiUrl)
    const allowed = cors(corsOptions)
    return <E, R>(app: HttpApp.Default<E, R>): HttpApp.Default<E, R> =>
      Effect.withFiberRuntime((fiber) => {
        const request = Context.unsafeGet(fiber.currentContext, HttpServerRequest.HttpServerRequest)
        const started = performance.now()
        const given = request.headers["x-request-id"]
        const id = given !== undefined && REQUEST_ID.test(given) ? given : crypto.randomUUID()
        /** Counts and times the answer and writes its access line; what is left to log through the logger, if any. */
        const answered = (exit: Exit.Exit<HttpServerResponse.HttpServerResponse, E>) => {
          const status = statusOfExit(exit)
          record(request.method, request.url, status, (performance.now() - started) / 1000)
          if (direct && Exit.isSuccess(exit)) {
            writeLogLine(accessLine(request.method, request.url, status, id, fiber.id()))
            return undefined
          }
          if (!logged) return undefined
          const annotations = { "http.method": request.method, "http.url": request.url, "http.status": status }
          return Effect.annotateLogs(
            Exit.isSuccess(exit) ? Effect.log("Sent HTTP response") : Effect.log("Sent HTTP response", exit.cause),
            annotations
          )
        }
        // One step for the outcome: the answer is counted, logged and given its headers together.
        const origin = request.headers.origin
        const preflight = request.method === "OPTIONS"
        // CORS in this one place: every answer but a preflight's (which is all CORS) gets the same
        // headers, the API's, an error's and a refusal of the body checks alike, so that a browser can
        // read why it was refused.
        const corsHeaders = preflight ? undefined : allowed.headers(origin)
        const routed: HttpApp.Default<E, R> = preflight
          ? Effect.succeed(allowed.preflight(origin, request.headers["access-control-request-headers"]))
          : app
        const checked = withCheckedBody(request, routed, routes)
        const served = Effect.matchCauseEffect(checked, {
          onSuccess: (response) => {
            const answer = answerHeaders(response, id, pagePolicy(response), corsHeaders)
            const log = answered(Exit.succeed(response))
            return log === undefined ? Effect.succeed(answer) : Effect.as(log, answer)
          },
          onFailure: (cause) => {
            const log = answered(Exit.failCause(cause))
            const failed = Effect.zipRight(
              HttpApp.appendPreResponseHandler((_request, response) =>
                Effect.succeed(answerHeaders(response, id, undefined, corsHeaders))
              ),
              Effect.failCause(cause)
            )
            return log === undefined ? failed : Effect.zipRight(log, failed)
          }
        })
        // The server runs each request in a fibre of its own: its logs carry the id from here on, set
        // once on that fibre (`annotateLogs` would copy the fibre's FiberRefs twice, to set and restore).
        const tagged = Effect.zipRight(
          FiberRef.update(FiberRef.currentLogAnnotations, HashMap.set<string, unknown>("requestId", id)),
          served
        )
        return tracing ? Effect.zipRight(Effect.annotateCurrentSpan("http.request.id", id), tagged) : tagged
      })
  })

/**
 * The API served through the request pipeline. Bodies are read by `withCheckedBody` (never past
 * MAX_BODY_BYTES); the platform's own limit is set to the same. Without tracing the platform's
 * per-request span (URL parsing, header redaction) is skipped too. `routesOf` is the API whose
 * routes the pipeline knows (for metrics and body checks): every group, whichever are served.
 */
export const serveApi = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  routesOf: HttpApi.HttpApi<Id, Groups, E, R>,
  corsOptions: Effect.Effect<CorsOptions, never, AppConfig>
) =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const app = yield* HttpApiBuilder.httpApp
      const pipeline = yield* Effect.provideService(makeRequestPipeline(yield* corsOptions), ApiRoutes, {
        routeOf: routeTemplates(routesOf),
        payloadKindOf: payloadKinds(routesOf)
      })
      const serve = HttpServer.serve(pipeline(app))
      return (yield* FiberRef.get(FiberRef.currentTracerEnabled))
        ? serve
        : HttpMiddleware.withTracerDisabledWhen(serve, () => true)
    })
  ).pipe(
    Layer.provide([
      HttpApiBuilder.Router.Live,
      HttpApiBuilder.Middleware.layer,
      Layer.succeed(HttpIncomingMessage.MaxBodySize, Option.some(FileSystem.Size(MAX_BODY_BYTES)))
    ])
  )

/** The Node server's own limits, set deliberately rather than left to Node's defaults. */
const nodeServerSettings = Config.all({
  headersTimeout: durationConfig("HTTP_HEADERS_TIMEOUT", "5 seconds"),
  requestTimeout: durationConfig("HTTP_REQUEST_TIMEOUT", "8 seconds"),
  keepAliveTimeout: durationConfig("HTTP_KEEP_ALIVE_TIMEOUT", "5 seconds"),
  shutdownGrace: durationConfig("SHUTDOWN_GRACE", "10 seconds")
}).pipe(
  Config.mapOrFail((settings) =>
    Duration.greaterThan(settings.headersTimeout, settings.requestTimeout)
      ? Either.left(
          ConfigError.InvalidData(
            ["HTTP_HEADERS_TIMEOUT"],
            "Expected HTTP_HEADERS_TIMEOUT to be at most HTTP_REQUEST_TIMEOUT"
          )
        )
      : Either.right(settings)
  )
)

type NodeServerSettings = Config.Config.Success<typeof nodeServerSettings>

/** A whole HTTP/1.1 response with an `{error, code}` body, for a connection that ends with it. */
const rawRefusal = (declared: { readonly code: string; readonly status: number }, message: string) => {
  const body = JSON.stringify({ error: message, code: declared.code })
  return (
    `HTTP/1.1 ${declared.status} ${STATUS_CODES[declared.status]}\r\n` +
    `content-type: application/json\r\nx-content-type-options: nosniff\r\n` +
    `content-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`
  )
}

/** The `{error, code}` answer to a request Node's parser refused, or that did not arrive in time. */
const parserRefusal = (error: Error & { readonly code?: string }, settings: NodeServerSettings) => {
  const [declared, message] =
    error.code === "HPE_HEADER_OVERFLOW"
      ? [HeadersTooLarge, `the request line and headers exceed ${MAX_HEADER_BYTES} bytes`]
      : error.code === "ERR_HTTP_REQUEST_TIMEOUT"
        ? [
            RequestTimeout,
            `the request did not arrive whole within ${Duration.format(settings.requestTimeout)} ` +
              `(its headers within ${Duration.format(settings.headersTimeout)})`
          ]
        : error.code === "HPE_CHUNK_EXTENSIONS_OVERFLOW"
          ? [PayloadTooLarge, "the chunk extensions are too large"]
          : [BadRequest, `malformed HTTP request (${error.code ?? "unparsable"})`]
  return rawRefusal(declared, message)
}

/**
 * The Node server with its limits: a request's headers must arrive within HTTP_HEADERS_TIMEOUT
 * (also what a connection that sends nothing gets), the whole request within HTTP_REQUEST_TIMEOUT,
 * an idle kept-alive connection is closed after HTTP_KEEP_ALIVE_TIMEOUT, headers are capped at
 * 16 KiB. Whatever Node's parser refuses (or times out) is answered with an `{error, code}` body.
 */
const configuredNodeServer = (settings: NodeServerSettings) => {
  const server = createServer({
    headersTimeout: Duration.toMillis(settings.headersTimeout),
    requestTimeout: Duration.toMillis(settings.requestTimeout),
    keepAliveTimeout: Duration.toMillis(settings.keepAliveTimeout),
    maxHeaderSize: MAX_HEADER_BYTES,
    // How often Node looks for connections past those timeouts.
    connectionsCheckingInterval: 500,
    // HTTP/1.1 without Host is refused by the request pipeline, with a body.
    requireHostHeader: false
  })
  server.on("clientError", (error: Error & { readonly code?: string }, socket: Duplex) => {
    // Write only where no response of ours has started on this connection.
    const inFlight = (socket as Duplex & { _httpMessage?: { headersSent?: boolean } })._httpMessage
    if (error.code === "ECONNRESET" || !socket.writable || inFlight?.headersSent === true) {
      socket.destroy()
      return
    }
    socket.end(parserRefusal(error, settings))
  })
  // This API tunnels nothing.
  server.on("connect", (_request: IncomingMessage, socket: Duplex) => {
    socket.end(rawRefusal(BadRequest, "CONNECT is not supported"))
  })
  // An expectation other than 100-continue is ignored (RFC 9110 allows it): the request is served.
  server.on("checkExpectation", (request: IncomingMessage, response: ServerResponse) => {
    server.emit("request", request, response)
  })
  return server
}

/**
 * The configured Node server listening on `listen`. At shutdown it stops accepting and lets
 * in-flight requests finish; connections still open after SHUTDOWN_GRACE are cut, so a stuck
 * client cannot hold the process.
 */
export const nodeServerLayer = (listen: { readonly port: number; readonly host: string }) =>
  Layer.unwrapEffect(
    Effect.gen(function* () {
      const settings = yield* nodeServerSettings
      const server = configuredNodeServer(settings)
      const deadline = Layer.scopedDiscard(
        // Registered after the server's own finalizer, so it runs first: it only arms the timer.
        Effect.addFinalizer(() =>
          Effect.sync(() =>
            setTimeout(() => server.closeAllConnections(), Duration.toMillis(settings.shutdownGrace)).unref()
          )
        )
      )
      return deadline.pipe(Layer.provideMerge(NodeHttpServer.layer(() => server, listen)))
    })
  )

/** The Node server on HOST:PORT (loopback by default). */
export const NodeServerLive = Layer.unwrapEffect(
  Effect.map(AppConfig, (config) => nodeServerLayer({ port: config.port, host: config.host }))
)
