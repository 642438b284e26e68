/** The settings' defaults that depend on one another: the app's URL follows the port it listens on. */
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect } from "effect"
import { AppConfig } from "../../src/runtime/Config.js"

const settingsFrom = (env: Record<string, string>) =>
  Effect.provide(AppConfig, AppConfig.layer).pipe(
    Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))
  )

describe("AppConfig", () => {
  it.effect("without APP_URL the app is this service on its PORT: sign-in, identity pages and origins follow it", () =>
    Effect.gen(function* () {
      expect(yield* settingsFrom({})).toMatchObject({
        port: 3000,
        appUrl: "http://localhost:3000",
        apiUrl: "http://localhost:3000",
        webOrigins: ["http://localhost:3000"]
      })
      expect(yield* settingsFrom({ PORT: "3700" })).toMatchObject({
        port: 3700,
        appUrl: "http://localhost:3700",
        apiUrl: "http://localhost:3700",
        webOrigins: ["http://localhost:3700"]
      })
    })
  )

  it.effect("APP_URL, API_URL and WEB_ORIGIN given win over the port", () =>
    Effect.gen(function* () {
      expect(
        yield* settingsFrom({
          PORT: "3700",
          APP_URL: "https://cards.example.com",
          API_URL: "https://api.cards.example.com",
          WEB_ORIGIN: "https://app.example.com"
        })
      ).toMatchObject({
        appUrl: "https://cards.example.com",
        apiUrl: "https://api.cards.example.com",
        webOrigins: ["https://app.example.com"]
      })
      expect(yield* settingsFrom({ PORT: "3700", APP_URL: "https://cards.example.com" })).toMatchObject({
        apiUrl: "https://cards.example.com",
        webOrigins: ["https://cards.example.com"]
      })
    })
  )
})
