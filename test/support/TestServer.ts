import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Effect, Layer, Logger, LogLevel } from "effect"
import { AppConfig } from "../../src/Config.js"
import type { ChainClient } from "../../src/chain/ChainClient.js"
import type { TokenRegistry } from "../../src/chain/Tokens.js"
import { type PortLayers, portsLayer } from "../../src/Ports.js"
import { httpLive } from "../../src/Server.js"
import { TestChain } from "./TestChain.js"
import { TestDatabase } from "./TestDatabase.js"

export const TEST_APP_URL = "https://app.example.com"

/**
 * The real HTTP application on a free port over a throwaway database, with the environment given as
 * a map and its own temporary DATA_DIR. Ports are the configured defaults except those given; the
 * chain is a fresh devnet unless replaced. Provides the `HttpClient` pointed at the server, the
 * `SqlClient`, and whatever the chain layer offers the test (`TestDevnet`, `InMemoryChain`).
 */
export const testServer = <ChainExtras = Layer.Layer.Success<typeof TestChain>>(
  env: Record<string, string> = {},
  ports: Partial<Omit<PortLayers, "chain">> & {
    readonly chain?: Layer.Layer<ChainClient | TokenRegistry | ChainExtras, unknown, AppConfig>
  } = {}
) => {
  // The same layer value is provided to the ports and to the test: it is built once.
  const chain = (ports.chain ?? TestChain) as Layer.Layer<ChainClient | TokenRegistry | ChainExtras, unknown, AppConfig>
  return Layer.unwrapScoped(
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
      return httpLive(NodeHttpServer.layerTest).pipe(
        Layer.provide(portsLayer({ ...ports, chain })),
        Layer.provideMerge(chain),
        Layer.provideMerge(TestDatabase),
        Layer.provideMerge(AppConfig.layer),
        Layer.provide(Logger.minimumLogLevel(LogLevel.Warning)),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings)))))
      )
    })
  )
}
