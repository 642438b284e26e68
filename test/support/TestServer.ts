import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { HttpServer } from "@effect/platform"
import { NodeHttpClient } from "@effect/platform-node"
import { ConfigProvider, Effect, Layer, Logger, LogLevel } from "effect"
import { httpLive } from "../../src/App.js"
import { nodeServerLayer } from "../../src/http/Server.js"
import { type PortLayers, portsLayer } from "../../src/Ports.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { TestChain } from "./TestChain.js"
import { TestDatabase } from "./TestDatabase.js"

export const TEST_APP_URL = "https://app.example.com"

type ChainLayer = PortLayers["chain"]

/** The production Node server (its timeouts and parser handling) on `port` (0: a free one), and a client for it. */
const nodeServerTest = (port: number) =>
  HttpServer.layerTestClient.pipe(
    Layer.provide(NodeHttpClient.layerWithoutAgent),
    Layer.provide(NodeHttpClient.makeAgentLayer({ keepAlive: false })),
    Layer.provideMerge(nodeServerLayer({ port, host: "127.0.0.1" }))
  )

/** What the given layers offer, e.g. `InMemoryChain` beside the `ChainClient` it implements. */
type Offered<P> = {
  readonly [K in keyof P]: P[K] extends Layer.Layer<infer A, infer _E, infer _R> ? A : never
}[keyof P]

/** The devnet's `TestDevnet` and `ChainDeployment`, unless the chain is replaced. */
type DefaultChain<P> = P extends { readonly chain: unknown } ? never : Layer.Layer.Success<typeof TestChain>

/**
 * The real HTTP application on a free port over a throwaway database, with the environment given as
 * a map and its own temporary DATA_DIR, served by the production Node server (its limits and parser
 * handling) on a free port, or on `PORT` when the environment gives one (a browser test whose
 * APP_URL must name the server). Ports are the configured defaults except those given; the
 * chain is a fresh devnet unless replaced. Provides the `HttpClient` pointed at the server, the
 * `SqlClient`, and whatever the port layers offer the test (`TestDevnet`, `InMemoryChain`,
 * `ScriptedKycProvider`, ...).
 */
export const testServer = <const P extends Partial<PortLayers> = {}, D = never>(
  env: Record<string, string> = {},
  ports: P = {} as P,
  /** The database: a throwaway one (or `ProxiedTestDatabase`, to stall or cut it). */
  database: Layer.Layer<D | Layer.Layer.Success<typeof TestDatabase>, unknown> = TestDatabase as Layer.Layer<
    D | Layer.Layer.Success<typeof TestDatabase>,
    unknown
  >
) => {
  // The same layer values are provided to the ports and to the test: each is built once.
  const chain = ports.chain ?? TestChain
  const given = [chain, ...Object.entries(ports).flatMap(([name, port]) => (name === "chain" ? [] : [port]))]
  const app = Layer.unwrapScoped(
    Effect.gen(function* () {
      const dataDir = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(path.join(tmpdir(), "card-service-test-data-"))),
        (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
      )
      // Tests sign in and order far more often than a person; limits get their own tests.
      const settings = {
        APP_URL: TEST_APP_URL,
        LOG_LEVEL: "Warn",
        DATA_DIR: dataDir,
        RATE_LIMIT_SIGNIN: "100000",
        RATE_LIMIT_ORDERS: "100000",
        ...env
      }
      // What the service logs: LOG_LEVEL as it reads it (the level's name in any case), WARN by default.
      const logLevel =
        LogLevel.allLevels.find((level) => level.label === settings.LOG_LEVEL.toUpperCase()) ?? LogLevel.Warning
      // Port layers may need other ports (a wallet the chain): each is built once, in the ports.
      const portLayer = portsLayer({ ...ports, chain })
      return httpLive(nodeServerTest(Number(env.PORT ?? 0))).pipe(
        Layer.provide(portLayer),
        Layer.provideMerge(Layer.mergeAll(...(given as [ChainLayer])).pipe(Layer.provide(portLayer))),
        Layer.provideMerge(database),
        Layer.provideMerge(AppConfig.layer),
        Layer.provide(Logger.minimumLogLevel(logLevel)),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings)))))
      )
    })
  )
  return app as Layer.Layer<
    Layer.Layer.Success<typeof app> | Offered<P> | DefaultChain<P>,
    Layer.Layer.Error<typeof app>,
    never
  >
}
