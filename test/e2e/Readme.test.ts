/**
 * The README's walkthrough, run as a newcomer would: its shell blocks are read from README.md (not
 * copied here), the first one starts the service (`npm start` with the settings it names, on a
 * fresh data directory and a free port), the others run in order in one bash session.
 */
import { readFileSync } from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { killProcessesMentioning, runToExit, startService, temporaryDirectory } from "../support/process.js"

/** The ```sh blocks of the README's walkthrough section, in order. */
const walkthroughBlocks = () => {
  const readme = readFileSync("README.md", "utf8")
  const start = readme.indexOf("## Walkthrough")
  expect(start).toBeGreaterThan(-1)
  const end = readme.indexOf("\n## ", start + 1)
  const section = readme.slice(start, end === -1 ? undefined : end)
  return [...section.matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!)
}

/** `A=1 B=2 npm start` → `{ A: "1", B: "2" }`. */
const startSettings = (block: string) => {
  const command = block.trim()
  expect(command).toMatch(/^(\w+=\S+ )*npm start$/)
  return Object.fromEntries(
    command
      .replace(/ ?npm start$/, "")
      .split(" ")
      .filter((part) => part !== "")
      .map((part) => part.split("=") as [string, string])
  )
}

describe("the README's walkthrough", () => {
  it.scopedLive(
    "runs as written: signed in, approved with a card, an order paid with the card's key on the statement, a strategy",
    () =>
      Effect.gen(function* () {
        const [server, ...steps] = walkthroughBlocks()
        expect(steps.length).toBeGreaterThanOrEqual(4)
        const dataDir = yield* temporaryDirectory("card-service-readme-")
        yield* Effect.addFinalizer(() => killProcessesMentioning(dataDir))
        const port = yield* freePort
        // The blocks say localhost:3000, the default APP_URL; this run has its own port.
        const url = `http://127.0.0.1:${port}`
        const service = yield* startService({
          ...startSettings(server!),
          PORT: String(port),
          APP_URL: url,
          DATA_DIR: dataDir
        })
        // The last line hands the token over.
        const script = `${steps.join("\n").replaceAll("http://localhost:3000", url)}\necho "TOKEN=$TOKEN"`
        const { code, output } = yield* runToExit("bash", ["-euo", "pipefail", "-c", script], {
          PATH: process.env.PATH ?? "",
          HOME: process.env.HOME ?? ""
        })
        expect(code, output).toBe(0)
        const token = /^TOKEN=(.+)$/m.exec(output)?.[1]
        expect(token, output).toBeDefined()

        const get = (route: string) =>
          Effect.promise(() =>
            fetch(`${service.baseUrl}${route}`, { headers: { authorization: `Bearer ${token}` } }).then(
              async (response) => ({ status: response.status, body: await response.json() })
            )
          )
        const me = yield* get("/me")
        expect(me).toMatchObject({ status: 200, body: { kyc: "approved", card: { holder: "Ada Lovelace" } } })
        const statement = yield* get("/me/activity")
        expect(statement.status).toBe(200)
        expect(statement.body).toEqual([
          expect.objectContaining({ type: "payment", usd: 4.2, description: "Flat white", tx: expect.any(String) })
        ])
        const strategy = yield* get("/strategy")
        expect(strategy).toMatchObject({ status: 200, body: { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 140 } })
        expect((yield* get("/portfolio")).status).toBe(200)
      }),
    300_000
  )
})
