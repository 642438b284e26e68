import { NodeHttpServer } from "@effect/platform-node"
import { ConfigProvider, Layer, Logger, LogLevel } from "effect"
import { AppConfig } from "../../src/Config.js"
import { HttpLive } from "../../src/Server.js"
import { TestDatabase } from "./TestDatabase.js"

export const TEST_APP_URL = "https://app.example.com"

/**
 * The real HTTP application on a free port over a throwaway database, with the environment
 * given as a map. Provides the `HttpClient` pointed at the server and the `SqlClient`.
 */
export const testServer = (env: Record<string, string> = {}) =>
  HttpLive.pipe(
    Layer.provideMerge(NodeHttpServer.layerTest),
    Layer.provideMerge(TestDatabase),
    Layer.provideMerge(AppConfig.layer),
    Layer.provide(Logger.minimumLogLevel(LogLevel.Warning)),
    Layer.provide(
      Layer.setConfigProvider(
        ConfigProvider.fromMap(new Map(Object.entries({ APP_URL: TEST_APP_URL, LOG_LEVEL: "Warn", ...env })))
      )
    )
  )
