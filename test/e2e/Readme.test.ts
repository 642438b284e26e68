/**
 * The README as a newcomer reads it. Its walkthrough runs as written: the shell blocks are read from
 * README.md (not copied here), the first one starts the service (`npm start` with the settings it
 * names, on a fresh data directory), the others run in order in one bash session; both on PORT 3700,
 * which the blocks never name. And its error table lists every code the OpenAPI document declares,
 * with the status it is declared under.
 */
import { readFileSync } from "node:fs"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ScriptedAgentWallet } from "../../src/agent/ScriptedAgentWallet.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { send } from "../support/http.js"
import { killProcessesMentioning, runToExit, startService, temporaryDirectory } from "../support/process.js"
import { testServer } from "../support/TestServer.js"

/** Not the default port: the walkthrough must follow PORT wherever it is set. */
const PORT = "3700"

/** A section of the README, from its heading to the next heading of the same level or above. */
const section = (heading: string) => {
  const readme = readFileSync("README.md", "utf8")
  const start = readme.indexOf(`\n${heading}\n`)
  expect(start, heading).toBeGreaterThan(-1)
  const level = heading.split(" ")[0]!
  const next = readme.slice(start + heading.length + 2).search(new RegExp(`\\n#{1,${level.length}} `))
  return readme.slice(start, next === -1 ? undefined : start + heading.length + 2 + next)
}

/** The ```sh blocks of the README's walkthrough section, in order. */
const walkthroughBlocks = () =>
  [...section("## Walkthrough: one user, end to end").matchAll(/```sh\n([\s\S]*?)```/g)].map((match) => match[1]!)

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
    "runs as written on PORT 3700: signed in, approved with a card, an order paid with the card's key on the statement, a strategy",
    () =>
      Effect.gen(function* () {
        const [server, ...steps] = walkthroughBlocks()
        expect(steps.length).toBeGreaterThanOrEqual(4)
        // Where the blocks name a port, they name it from PORT.
        expect(steps.join("\n")).not.toMatch(/:3000\b/)
        const dataDir = yield* temporaryDirectory("card-service-readme-")
        yield* Effect.addFinalizer(() => killProcessesMentioning(dataDir))
        const service = yield* startService({ ...startSettings(server!), PORT, DATA_DIR: dataDir })
        expect(service.baseUrl).toBe(`http://127.0.0.1:${PORT}`)
        // The last line hands the token over.
        const { code, output } = yield* runToExit(
          "bash",
          ["-euo", "pipefail", "-c", `${steps.join("\n")}\necho "TOKEN=$TOKEN"`],
          {
            PATH: process.env.PATH ?? "",
            HOME: process.env.HOME ?? "",
            PORT
          }
        )
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

/** Answered before any route, by the Node server: the OpenAPI document describes routes only. */
const BEFORE_ROUTING = new Set(["REQUEST_TIMEOUT", "HEADERS_TOO_LARGE"])

interface SchemaNode {
  readonly $ref?: string
  readonly anyOf?: ReadonlyArray<SchemaNode>
  readonly oneOf?: ReadonlyArray<SchemaNode>
  readonly properties?: { readonly code?: { readonly enum?: ReadonlyArray<string> } }
}

layer(
  testServer(
    { MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD", AGENT_MODE: "dry" },
    { chain: InMemoryChain.layer(), agentWallet: ScriptedAgentWallet.layer() }
  ),
  { excludeTestServices: true }
)("the README's error table", (it) => {
  it.effect("lists every code of the OpenAPI document (merchant, agent and devnet on) with its status", () =>
    Effect.gen(function* () {
      const spec = (yield* send("GET", "/openapi.json")).body
      const schemas: Record<string, SchemaNode> = spec.components.schemas
      const codesOf = (node: SchemaNode): ReadonlyArray<string> =>
        node.$ref !== undefined
          ? codesOf(schemas[node.$ref.split("/").pop()!]!)
          : [...(node.anyOf ?? []), ...(node.oneOf ?? [])].flatMap(codesOf).concat(node.properties?.code?.enum ?? [])
      const declared = new Set<string>()
      for (const operation of Object.values(spec.paths).flatMap((item) => Object.values(item as object))) {
        for (const [status, response] of Object.entries(
          (operation as { responses: Record<string, { content?: Record<string, { schema: SchemaNode }> }> }).responses
        )) {
          for (const { schema } of Object.values(response.content ?? {})) {
            for (const code of codesOf(schema)) declared.add(`${status} ${code}`)
          }
        }
      }

      // | 409 | `KYC_ALREADY_APPROVED` | ... |, a row may name several codes.
      const rows = section("### Errors")
        .split("\n")
        .flatMap((line) => {
          const match = /^\| (\d{3}) \| ([^|]+) \|/.exec(line)
          return match === null
            ? []
            : [...match[2]!.matchAll(/`([A-Z0-9_]+)`/g)].map((code) => `${match[1]} ${code[1]}`)
        })
      const listed = new Set(rows)
      expect(rows.length, "each code once").toBe(listed.size)
      expect(
        [...declared].filter((row) => !listed.has(row)).sort(),
        "declared in OpenAPI, missing from the README"
      ).toEqual([])
      expect(
        [...listed].filter((row) => !declared.has(row) && !BEFORE_ROUTING.has(row.split(" ")[1]!)).sort(),
        "in the README, not declared in OpenAPI"
      ).toEqual([])
      // The agent's codes the README once left out.
      for (const code of [
        "CARD_REQUIRED",
        "NO_AGENT_ACCOUNT",
        "UNKNOWN_TOKEN",
        "AGENT_WALLET_ERROR",
        "SESSION_EXPIRED",
        "NOT_LOGGED_IN"
      ]) {
        expect(
          rows.some((row) => row.endsWith(` ${code}`)),
          code
        ).toBe(true)
      }
    })
  )
})
