/**
 * The app's layer: the API with every handler and domain service, the background loops, CORS,
 * OpenAPI, the docs page and the start-up line, served through the request pipeline
 * (http/Server.ts). `httpLive` takes the `HttpServer` layer (main.ts gives it a Node server on
 * PORT, tests one on a free port) and requires the ports (Ports.ts), the database and the
 * configuration from outside.
 */
import { HttpApiBuilder, HttpApiScalar, HttpServer, OpenApi } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Config, Deferred, Effect, Layer, Option } from "effect"
import { Api, CoreApi } from "./Api.js"
import { Account } from "./account/Account.js"
import { AccountHttpLive, SignInHttpLive } from "./account/Http.js"
import { Standing } from "./account/Standing.js"
import { Agent } from "./agent/Agent.js"
import { AgentLoop } from "./agent/AgentLoop.js"
import { AgentFeature, StrategyHttpLive } from "./agent/Http.js"
import { WebAppLive } from "./app/WebApp.js"
import { Auth } from "./auth/Auth.js"
import { Authorizations } from "./authorizations/Authorizations.js"
import { BalanceFollowerLive } from "./authorizations/BalanceFollower.js"
import { CardNetwork } from "./authorizations/CardNetwork.js"
import { CardSettlement, CardSettlementLive } from "./authorizations/CardSettlement.js"
import { AuthorizationsHttpLive, CardNetworkHttpLive, CardSandboxFeature } from "./authorizations/Http.js"
import { CardDebts } from "./cards/CardDebts.js"
import { CardReconcileLive, CardReconciler } from "./cards/CardReconciler.js"
import { Cards } from "./cards/Cards.js"
import { CardHttpLive, StatementHttpLive } from "./cards/Http.js"
import { ProgramSender } from "./cards/ProgramSender.js"
import { Statement } from "./cards/Statement.js"
import { ChainClient } from "./chain/ChainClient.js"
import { DevnetFeature } from "./devnet/Http.js"
import { EventStreams } from "./events/EventStreams.js"
import { AgentEventsLive, AuthorizationEventsLive, DebtEventsLive, Events, KycEventsLive } from "./events/Events.js"
import { CloseEventStreamsFirst, EventsHttpLive } from "./events/Http.js"
import { HealthHttpLive } from "./health/Http.js"
import { Readiness } from "./health/Readiness.js"
import { apiInForce, withFeature } from "./http/Feature.js"
import { LandingLive } from "./http/Landing.js"
import { metricsRoute } from "./http/MetricsRoute.js"
import { RateLimiter } from "./http/RateLimit.js"
import { normalizeErrors, serveApi } from "./http/Server.js"
import { KycHttpLive, KycSandboxHttpLive, KycWebhookHttpLive } from "./kyc/Http.js"
import { Kyc } from "./kyc/Kyc.js"
import { KycConfig } from "./kyc/KycConfig.js"
import { KycProvider } from "./kyc/KycProvider.js"
import { SandboxDeskLive } from "./kyc/SandboxDesk.js"
import { MarketHttpLive } from "./market/Http.js"
import { Market, MarketRefreshLive } from "./market/Market.js"
import { MerchantFeature } from "./merchant/Http.js"
import { outagesLayer } from "./observability/Outages.js"
import { Retention, RetentionLive } from "./retention/Retention.js"
import { AppConfig } from "./runtime/Config.js"
import { Secrets } from "./runtime/Secrets.js"
import { ServerAddress } from "./runtime/ServerAddress.js"
import { SERVICE_NAME, SERVICE_VERSION } from "./runtime/ServiceInfo.js"
import { DatabasePool } from "./storage/Database.js"

/** Outages of this service's database and chain, probed with `SELECT 1` and the latest block. */
const OutagesLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const chain = yield* ChainClient
    return outagesLayer({ database: sql`SELECT 1`, chain: chain.blockTime })
  })
)

/** The domain services, each with its own repositories; the ports they use come from outside. */
const DomainLive = Layer.mergeAll(
  Account.Default,
  Layer.merge(Agent.Default, AgentLoop.Default).pipe(Layer.provide(AgentEventsLive)),
  RateLimiter.Default,
  EventStreams.Default
).pipe(
  Layer.provideMerge(Standing.Default),
  Layer.provideMerge(
    Layer.mergeAll(
      Auth.Default,
      Kyc.Default.pipe(Layer.provide(KycEventsLive)),
      SandboxDeskLive,
      Statement.Default,
      CardDebts.Default.pipe(Layer.provide(DebtEventsLive)),
      Market.Default,
      Layer.merge(Authorizations.Default, CardSettlement.Default).pipe(Layer.provide(AuthorizationEventsLive))
    )
  ),
  Layer.provideMerge(Layer.mergeAll(Cards.Default, Events.Default, ProgramSender.Default)),
  Layer.provide(KycConfig.layer)
)

const CoreLive = Layer.mergeAll(
  HealthHttpLive,
  SignInHttpLive,
  AccountHttpLive,
  KycHttpLive,
  KycWebhookHttpLive,
  KycSandboxHttpLive,
  MarketHttpLive,
  StatementHttpLive,
  CardHttpLive,
  AuthorizationsHttpLive,
  CardNetworkHttpLive,
  StrategyHttpLive,
  EventsHttpLive,
  MarketRefreshLive,
  BalanceFollowerLive,
  CardSettlementLive,
  CardReconcileLive.pipe(Layer.provide(CardReconciler.Default)),
  RetentionLive.pipe(Layer.provide(Retention.Default))
)

/**
 * The parts served only when switched on, each declared once beside its handlers (http/Feature.ts),
 * in the order the OpenAPI document lists them.
 */
const ApiInForce = apiInForce(CoreApi).pipe(
  withFeature(MerchantFeature),
  withFeature(AgentFeature),
  withFeature(DevnetFeature),
  withFeature(CardSandboxFeature)
)

/**
 * The API in force: the core and the parts switched on, with their handlers, the error normaliser
 * knowing the parts switched off, and /ready's registry of the parts' checks. Its OpenAPI document
 * (/openapi.json, /docs) names API_URL as the server.
 */
const ApiLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const { apiUrl } = yield* AppConfig
    const { api, live, switchedOff } = yield* ApiInForce
    return HttpApiBuilder.api(api.annotate(OpenApi.Servers, [{ url: apiUrl, description: "API_URL" }])).pipe(
      Layer.provide([CoreLive, live, HttpApiBuilder.middleware(api, normalizeErrors(switchedOff))])
    )
  })
).pipe(Layer.provide(Readiness.layer))

/** CORS for the web app's origins, answered by the request pipeline (http/Cors.ts). */
const corsOptions = Effect.map(AppConfig, (config) => ({
  allowedOrigins: config.webOrigins,
  // The reference x402 client also sends Access-Control-Expose-Headers as a request header.
  allowedHeaders: [
    "authorization",
    "content-type",
    "payment-signature",
    "access-control-expose-headers",
    "x-request-id",
    // A browser resuming GET /me/events with fetch.
    "last-event-id"
  ],
  exposedHeaders: ["payment-required", "payment-response", "x-request-id", "www-authenticate"],
  maxAgeSeconds: 600
}))

/** `GET /metrics` in Prometheus' text format, beside the API (for METRICS_TOKEN or loopback clients). */
const MetricsRouteLive = HttpApiBuilder.Router.use((router) =>
  Effect.flatMap(DatabasePool, metricsRoute).pipe(Effect.flatMap((handler) => router.get("/metrics", handler)))
)

/**
 * /docs uses nothing from elsewhere: Scalar's script is inlined, and its default web fonts (from
 * Scalar's servers), its usage telemetry and its toolbar (shown on localhost; "Share" uploads the
 * document to Scalar, "Generate SDKs" opens their service) are off. `telemetry` and `showToolbar`
 * are options Scalar reads that HttpApiScalar's type does not list, hence no object literal at the call.
 */
const offlineScalar = { withDefaultFonts: false, telemetry: false, showToolbar: "never" }

/** Tells the services that wait for it where the server listens. */
const AnnounceAddress = Layer.effectDiscard(
  Effect.gen(function* () {
    const server = yield* HttpServer.HttpServer
    yield* Deferred.succeed(yield* ServerAddress, server.address)
  })
)

const urlOf = (address: HttpServer.Address) =>
  address._tag === "UnixAddress"
    ? `unix:${address.path}`
    : `http://${address.hostname.includes(":") ? `[${address.hostname}]` : address.hostname}:${address.port}`

/**
 * One line, once listening, with what an operator checks first: where, which parts are on, what is
 * embedded and which secrets are development values; and one when shutting down.
 */
const StartupSummary = Layer.scopedDiscard(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const server = yield* HttpServer.HttpServer
    const chain = yield* ChainClient
    const kyc = yield* KycProvider
    const cardNetwork = yield* CardNetwork
    const developmentSecrets = yield* Effect.flatMap(Secrets, (secrets) => secrets.development)
    const rpcUrl = yield* Config.option(Config.string("CHAIN_RPC_URL"))
    const url = urlOf(server.address)
    yield* Effect.logInfo(`${SERVICE_NAME} ${SERVICE_VERSION} listening on ${url}, docs at ${url}/docs`).pipe(
      Effect.annotateLogs({
        url,
        docs: `${url}/docs`,
        database: Option.isSome(config.databaseUrl) ? "DATABASE_URL" : "embedded PostgreSQL",
        chain: `${Option.isNone(rpcUrl) && Option.isSome(chain.faucet) ? "embedded devnet" : "CHAIN_RPC_URL"} (${chain.network})`,
        merchant: Option.isSome(config.merchantPayTo) ? "on" : "off",
        agent: config.agentMode,
        identityProvider: kyc.name,
        cardNetwork: cardNetwork.name,
        developmentSecrets: developmentSecrets.length === 0 ? "none" : developmentSecrets.join(", ")
      })
    )
    yield* Effect.addFinalizer(() => Effect.logInfo(`${SERVICE_NAME} shutting down`))
  })
)

/**
 * The HTTP application on the given server layer. The server is built last, so it starts
 * listening only once every service below it is ready: a connection accepted earlier would wait
 * for a handler that is not attached yet (and hold up shutdown).
 */
export const httpLive = <A, E, R>(server: Layer.Layer<A | HttpServer.HttpServer, E, R>) =>
  serveApi(Api, corsOptions).pipe(
    Layer.merge(AnnounceAddress),
    Layer.merge(StartupSummary),
    Layer.merge(CloseEventStreamsFirst),
    Layer.provideMerge(server),
    Layer.provide([
      HttpApiScalar.layer({ path: "/docs", scalar: offlineScalar }),
      LandingLive,
      WebAppLive,
      MetricsRouteLive
    ]),
    Layer.provide(HttpApiBuilder.middlewareOpenApi({ path: "/openapi.json" })),
    Layer.provide(ApiLive),
    // The domain services are in the app's context too: tests and tools reach them (the agent loop's tick).
    Layer.provideMerge(DomainLive),
    // Below everything that reports to it: one outage tracker for the whole app.
    Layer.provideMerge(OutagesLive),
    Layer.provide(ServerAddress.layer)
  )
