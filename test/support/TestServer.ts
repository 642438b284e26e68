import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Effect, Layer, Logger, LogLevel } from "effect"
import { AppConfig } from "../../src/Config.js"
import { httpLive } from "../../src/Server.js"
import { TestChain } from "./TestChain.js"
import { TestDatabase } from "./TestDatabase.js"

export const TEST_APP_URL = "https://app.example.com"

/**
 * The real HTTP application on a free port over a throwaway database and devnet, with the
 * environment given as a map and its own temporary DATA_DIR. Provides the `HttpClient` pointed
 * at the server, the `SqlClient` and the `TestDevnet`.
 */
export const testServer = (env: Record<string, string> = {}) =>
  Layer.unwrapScoped(
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
        Layer.provideMerge(TestDatabase),
        Layer.provideMerge(TestChain),
        Layer.provideMerge(AppConfig.layer),
        Layer.provide(Logger.minimumLogLevel(LogLevel.Warning)),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings)))))
      )
    })
  )
