/** `npm run cards:reconcile` in tests: a database of the test's own (the script connects to it too) and the script run. */
import { expect } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { sqlLayer } from "../../src/storage/Database.js"
import { runToExit } from "./process.js"
import { temporaryDatabaseUrl } from "./TestDatabase.js"

/** The test database's URL, for the script's DATABASE_URL. */
export class DatabaseUrl extends Context.Tag("test/DatabaseUrl")<DatabaseUrl, string>() {}

/** A database of the test's own, so that the reconciliation sees only what the test made. */
export const OwnDatabase = Layer.unwrapScoped(
  Effect.map(temporaryDatabaseUrl, (url) => Layer.merge(sqlLayer(Redacted.make(url)), Layer.succeed(DatabaseUrl, url)))
)

/** `npm run cards:reconcile` as a child process with the service's settings: its exit code and JSON summary. */
export const runReconcile = (env: Record<string, string>) =>
  Effect.gen(function* () {
    const { code, output } = yield* runToExit(process.execPath, ["--import", "tsx", "scripts/cards-reconcile.ts"], {
      PATH: process.env.PATH ?? "",
      HOME: process.env.HOME ?? "",
      ...env
    })
    const line = output.split("\n").find((text) => text.startsWith('{"clearings"'))
    expect(line, output).toBeDefined()
    // biome-ignore lint/suspicious/noExplicitAny: the summary is checked field by field
    return { code, summary: JSON.parse(line!) as any, output }
  })
