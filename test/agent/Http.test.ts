/**
 * The agent over HTTP on in-memory ports: the strategy and its validation, whose account the
 * public endpoints describe, the portfolio and preview, the wallet's failures, and the gates of
 * AGENT_MODE.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Option, Ref } from "effect"
import { parseUnits } from "viem"
import { ScriptedAgentWallet } from "../../src/agent/ScriptedAgentWallet.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { ScriptedPriceFeed } from "../../src/market/ScriptedPriceFeed.js"
import { cardHolder } from "../support/agent.js"
import { newAccount, signIn } from "../support/auth.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

const FRIDAY_1540_ET = "2026-11-20T20:40:00Z"
const SATURDAY_NOON_ET = "2026-11-21T17:00:00Z"

const strategy = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 70 }

const putStrategy = (token: string, body: unknown) => send("PUT", "/strategy", { headers: bearer(token), json: body })

const decisionRows = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM agent_decisions`
).pipe(
  Effect.map((rows) => rows[0]!.n),
  Effect.orDie
)

const ports = () => ({
  chain: InMemoryChain.layer(),
  kycProvider: ScriptedKycProvider.layer(),
  agentWallet: ScriptedAgentWallet.layer()
})

// The loop looks for due cards once, at start: a card is due as soon as its strategy is set, and a
// loop tick deciding it would be a decision no endpoint here wrote.
const dry = testServer({ AGENT_MODE: "dry", AGENT_READ_TIMEOUT: "300 millis", AGENT_POLL: "24 hours" }, ports())

/**
 * A card holder with the test's strategy, whose agent wallet holds `usd1` and NVDA and SPY shares,
 * and whose card holds `cardUsd1` (all in whole units).
 */
const holderWith = (holdings: {
  readonly usd1: string
  readonly NVDA: string
  readonly SPY: string
  readonly cardUsd1: string
}) =>
  Effect.gen(function* () {
    const wallet = yield* ScriptedAgentWallet
    const chain = yield* InMemoryChain
    const holder = yield* cardHolder()
    const [nvda, spy] = ["NVDA", "SPY"].map((s) => chain.tokens.find((t) => t.symbol === s)!)
    yield* putStrategy(holder.token, strategy)
    yield* wallet.setHoldings(holder.cardId, {
      usd1: parseUnits(holdings.usd1, 18),
      tokens: new Map([
        [nvda!.address, parseUnits(holdings.NVDA, 18)],
        [spy!.address, parseUnits(holdings.SPY, 18)]
      ])
    })
    yield* chain.mint(chain.usd1.address, holder.account.address, parseUnits(holdings.cardUsd1, 18))
    return holder
  })

layer(dry, { excludeTestServices: true })("the agent in dry mode", (it) => {
  it.effect("the agent's endpoints are in /openapi.json with their error bodies", () =>
    Effect.gen(function* () {
      const spec = (yield* send("GET", "/openapi.json")).body
      for (const path of ["/portfolio", "/agent/preview", "/agent/decisions", "/agent/session", "/strategy"]) {
        expect(Object.keys(spec.paths)).toContain(path)
      }
      const portfolio = spec.paths["/portfolio"].get
      // Its own errors, and the API-wide ones (400, 413, 415, 500).
      expect(Object.keys(portfolio.responses).sort()).toEqual([
        "200",
        "400",
        "401",
        "403",
        "404",
        "409",
        "413",
        "415",
        "500",
        "502",
        "503"
      ])
      expect(JSON.stringify(portfolio.responses["502"])).toContain("#/components/schemas/SessionExpired")
      expect(JSON.stringify(spec.components.schemas.SessionExpired)).toContain("SESSION_EXPIRED")
      // 404 is only the API-wide one (the agent off, no such route); no default account is 409.
      for (const path of ["/portfolio", "/agent/preview", "/agent/decisions"]) {
        expect(JSON.stringify(spec.paths[path].get.responses["404"]), path).not.toContain("NoAgentAccount")
        expect(JSON.stringify(spec.paths[path].get.responses["409"]), path).toContain("NoAgentAccount")
      }

      // The preview's decision: one shape per action, told apart by `action`.
      const schemas = spec.components.schemas
      expect(spec.components.schemas.Preview.properties.decision).toEqual({ $ref: "#/components/schemas/Decision" })
      const shapes = ["NoneDecision", "RefillDecision", "HoldDecision", "RebalanceDecision"]
      expect(schemas.Decision.oneOf).toEqual(shapes.map((name) => ({ $ref: `#/components/schemas/${name}` })))
      expect(schemas.Decision.discriminator).toEqual({
        propertyName: "action",
        mapping: Object.fromEntries(
          ["none", "refill", "hold", "rebalance"].map((action, i) => [action, `#/components/schemas/${shapes[i]}`])
        )
      })
      const common = ["action", "horizon", "needUsd", "reason", "rule"]
      const shape = (...more: ReadonlyArray<string>) => [...common, ...more].sort()
      expect(Object.fromEntries(shapes.map((name) => [name, [...schemas[name].required].sort()]))).toEqual({
        NoneDecision: shape(),
        RefillDecision: shape("usd", "repayUsd", "symbol", "spread"),
        HoldDecision: shape("usd"),
        RebalanceDecision: shape("usd", "symbol", "buySymbol", "spread")
      })
      // Every field of a shape is required: none is optional or nullable.
      for (const name of shapes) {
        expect(Object.keys(schemas[name].properties).sort(), name).toEqual([...schemas[name].required].sort())
        expect(JSON.stringify(schemas[name]), name).not.toContain('"null"')
      }
      expect(schemas.RefillDecision.properties.spread.type).toBe("number")
      expect(schemas.NoneDecision.description).toContain("usd, symbol, buySymbol and spread are absent")
    })
  )

  it.effect(
    "without a token and with no card made public, the account reads are 401 saying how to read one's own",
    () =>
      Effect.gen(function* () {
        // A card holder with a strategy: not shown to whoever asks.
        const { token } = yield* cardHolder()
        expect((yield* putStrategy(token, strategy)).status).toBe(200)
        for (const path of ["/portfolio", "/agent/preview", "/agent/decisions"]) {
          const response = yield* send("GET", path)
          expect(response.status, path).toBe(401)
          expect(response.body, path).toEqual({
            error: expect.stringContaining("no card is public here: send your bearer token"),
            code: "UNAUTHORIZED"
          })
          expect(response.headers["www-authenticate"], path).toContain("Bearer")
          expect((yield* send("GET", path, { headers: bearer(token) })).status, path).toBe(200)
        }
      })
  )

  it.effect("a strategy needs a card: 403 CARD_REQUIRED", () =>
    Effect.gen(function* () {
      const { token } = yield* signIn()
      const response = yield* putStrategy(token, strategy)
      expect(response.status).toBe(403)
      expect(response.body).toEqual({ error: expect.any(String), code: "CARD_REQUIRED" })
      expect((yield* send("GET", "/portfolio", { headers: bearer(token) })).body.code).toBe("CARD_REQUIRED")
    })
  )

  it.effect("invalid strategies are 400 naming the field; unknown tokens are 400 UNKNOWN_TOKEN", () =>
    Effect.gen(function* () {
      const { token } = yield* cardHolder()
      const cases: ReadonlyArray<readonly [unknown, string, string]> = [
        [{ targets: { NVDA: 0.5, SPY: 0.4 }, weeklySpendUsd: 70 }, "BAD_REQUEST", "targets"],
        [
          {
            targets: Object.fromEntries(Array.from({ length: 11 }, (_, i) => [`T${i}`, 1 / 11])),
            weeklySpendUsd: 70
          },
          "BAD_REQUEST",
          "targets"
        ],
        [{ targets: { NVDA: 0, SPY: 1 }, weeklySpendUsd: 70 }, "BAD_REQUEST", "targets.NVDA"],
        [{ targets: { GME: 1 }, weeklySpendUsd: 70 }, "UNKNOWN_TOKEN", "targets.GME"],
        [{ targets: { NVDA: 1 }, weeklySpendUsd: -1 }, "BAD_REQUEST", "weeklySpendUsd"],
        [{ targets: { NVDA: 1 }, weeklySpendUsd: 10, timeZone: "Mars/Olympus" }, "BAD_REQUEST", "timeZone"],
        [{ targets: { NVDA: "half" }, weeklySpendUsd: 10 }, "BAD_REQUEST", "targets"]
      ]
      for (const [body, code, field] of cases) {
        const response = yield* putStrategy(token, body)
        expect(response.status, JSON.stringify(body)).toBe(400)
        expect(response.body.code).toBe(code)
        expect(response.body.error).toContain(field)
      }
      const none = yield* send("GET", "/strategy", { headers: bearer(token) })
      expect(none.status).toBe(404)
      expect(none.body.code).toBe("STRATEGY_NOT_FOUND")
      // An optional field of the wrong type is one sentence about it (not also "or undefined").
      expect((yield* putStrategy(token, { targets: { NVDA: 1 }, weeklySpendUsd: 10, timeZone: 5 })).body).toEqual({
        error: "timeZone: must be a string",
        code: "BAD_REQUEST"
      })
    })
  )

  it.effect("the strategy is answered keyed by symbol; a second PUT replaces the first", () =>
    Effect.gen(function* () {
      const chain = yield* InMemoryChain
      const wallet = yield* ScriptedAgentWallet
      const { cardId, token } = yield* cardHolder()
      const tsla = chain.tokens.find((t) => t.symbol === "TSLA")!
      const first = yield* putStrategy(token, {
        targets: { [tsla.address.toLowerCase()]: 0.25, nvda: 0.75 },
        weeklySpendUsd: 140
      })
      expect(first.status).toBe(200)
      expect(first.body).toEqual({
        targets: { TSLA: 0.25, NVDA: 0.75 },
        weeklySpendUsd: 140,
        timeZone: "America/New_York",
        updatedAt: expect.any(Number)
      })
      const second = yield* putStrategy(token, { ...strategy, timeZone: "Europe/Paris" })
      expect(second.body).toMatchObject({ targets: { NVDA: 0.5, SPY: 0.5 }, timeZone: "Europe/Paris" })
      expect((yield* send("GET", "/strategy", { headers: bearer(token) })).body).toEqual(second.body)
      // The wallet was funded once, at the first strategy.
      expect((yield* wallet.funded).filter((id) => id === cardId)).toHaveLength(1)
    })
  )

  it.effect("a token means the caller's account; a token that does not authenticate is 401, never a fallback", () =>
    Effect.gen(function* () {
      const wallet = yield* ScriptedAgentWallet
      const chain = yield* InMemoryChain
      const [first, second] = [yield* cardHolder("First Holder"), yield* cardHolder("Second Holder")]
      const nvda = chain.tokens.find((t) => t.symbol === "NVDA")!
      yield* wallet.setHoldings(second.cardId, { usd1: 0n, tokens: new Map([[nvda.address, parseUnits("2", 18)]]) })
      expect((yield* putStrategy(second.token, strategy)).status).toBe(200)
      const own = yield* send("GET", "/portfolio", { headers: bearer(second.token) })
      expect(own.body.card.address).toBe(second.account.address)
      expect(own.body.holdings.find((h: { symbol: string }) => h.symbol === "NVDA")).toMatchObject({
        balance: "2",
        valueUsd: 362,
        target: 0.5
      })
      const invalid = yield* send("GET", "/portfolio", { headers: bearer("not-a-valid-token") })
      expect(invalid.status).toBe(401)
      expect(invalid.body.code).toBe("UNAUTHORIZED")
      expect(invalid.headers["www-authenticate"]).toContain("Bearer")
      // The first holder has a card but no strategy: their portfolio is empty, their preview does nothing.
      const bare = yield* send("GET", "/portfolio", { headers: bearer(first.token) })
      expect(bare.body).toMatchObject({ totalUsd: 0, holdings: [{ symbol: "USD1", balance: "0", weight: 0 }] })
      const preview = yield* send("GET", "/agent/preview", { headers: bearer(first.token) })
      expect(preview.status).toBe(200)
      expect(preview.body.decision).toMatchObject({ action: "none", rule: "NO_STRATEGY" })
    })
  )

  it.effect("a card without a strategy: 200 on every agent path, the preview's action none (NO_STRATEGY)", () =>
    Effect.gen(function* () {
      const { token } = yield* cardHolder()
      const preview = yield* send("GET", `/agent/preview?at=${FRIDAY_1540_ET}`, { headers: bearer(token) })
      expect(preview.status).toBe(200)
      expect(preview.body).toEqual({
        at: Date.parse(FRIDAY_1540_ET),
        mode: "dry",
        decision: {
          action: "none",
          rule: "NO_STRATEGY",
          // A card issued today, no payments: nothing forecast without a weekly estimate.
          needUsd: 0,
          horizon: Date.parse("2026-11-23T14:30:00Z"),
          reason: expect.stringContaining("The card has no strategy yet")
        }
      })
      const portfolio = yield* send("GET", "/portfolio", { headers: bearer(token) })
      expect(portfolio.status).toBe(200)
      const log = yield* send("GET", "/agent/decisions", { headers: bearer(token) })
      expect(log).toMatchObject({ status: 200, body: [] })
      expect((yield* send("GET", "/agent/session", { headers: bearer(token) })).status).toBe(200)
    })
  )

  it.effect("the portfolio values the wallet at market: weights sum to 1, cash has no market", () =>
    Effect.gen(function* () {
      const { account, token } = yield* holderWith({ usd1: "100", NVDA: "5", SPY: "0.5", cardUsd1: "12.5" })
      const response = yield* send("GET", "/portfolio", { headers: bearer(token) })
      expect(response.status).toBe(200)
      const portfolio = response.body
      expect(portfolio.card).toEqual({ address: account.address, usd1: 12.5 })
      expect(portfolio.holdings.map((h: { symbol: string }) => h.symbol)).toEqual(["NVDA", "SPY", "USD1"])
      const values = { NVDA: 5 * 181, SPY: 0.5 * 665.4, USD1: 100 }
      for (const holding of portfolio.holdings) {
        expect(holding.valueUsd).toBeCloseTo(values[holding.symbol as keyof typeof values], 9)
      }
      expect(portfolio.totalUsd).toBeCloseTo(905 + 332.7 + 100, 9)
      const weights = portfolio.holdings.reduce((sum: number, h: { weight: number }) => sum + h.weight, 0)
      expect(Math.abs(weights - 1)).toBeLessThan(1e-9)
      const market = yield* send("GET", "/market/tokens/NVDA")
      expect(portfolio.holdings[0].market).toEqual(market.body.market)
      expect(portfolio.holdings[2]).toMatchObject({ market: null, target: 0, balance: "100" })
    })
  )

  it.effect("the preview decides at Friday 15:40 ET and on Saturday, and writes and sends nothing", () =>
    Effect.gen(function* () {
      const wallet = yield* ScriptedAgentWallet
      const { token } = yield* holderWith({ usd1: "0", NVDA: "5", SPY: "0.2", cardUsd1: "3" })
      const writesBefore = (yield* wallet.writes).length
      const rowsBefore = yield* decisionRows

      const friday = yield* send("GET", `/agent/preview?at=${FRIDAY_1540_ET}`, { headers: bearer(token) })
      expect(friday.status).toBe(200)
      expect(friday.body.at).toBe(Date.parse(FRIDAY_1540_ET))
      expect(friday.body.mode).toBe("dry")
      const refill = friday.body.decision
      // Below the $10 floor in the regular session: sell the most overweight token, NVDA. Every field of
      // the refill shape is there, the spread a number, and nothing else.
      expect(refill).toEqual({
        action: "refill",
        rule: "REFILL_BELOW_FLOOR",
        reason: expect.stringContaining("The agent sells"),
        usd: expect.any(Number),
        repayUsd: 0,
        symbol: "NVDA",
        spread: expect.any(Number),
        needUsd: expect.any(Number),
        horizon: Date.parse("2026-11-23T14:30:00Z")
      })
      expect(refill.usd).toBeCloseTo(Math.max(refill.needUsd, 10) - 3, 2)

      const saturday = yield* send("GET", `/agent/preview?at=${SATURDAY_NOON_ET}`, { headers: bearer(token) })
      // A hold: the refill that waits, and no symbol, spread or buySymbol.
      expect(saturday.body.decision).toEqual({
        action: "hold",
        rule: "NOT_TRADING",
        reason: expect.stringContaining("Mon Nov 23, 09:30 ET"),
        usd: 7,
        needUsd: expect.any(Number),
        horizon: Date.parse("2026-11-23T14:30:00Z")
      })

      expect(yield* decisionRows).toBe(rowsBefore)
      expect((yield* wallet.writes).length).toBe(writesBefore)
      const log = yield* send("GET", "/agent/decisions", { headers: bearer(token) })
      expect(log.body).toEqual([])
    })
  )

  it.effect("wallet failures are 502 with the wallet's code; a hanging wallet is cut at the read bound", () =>
    Effect.gen(function* () {
      const wallet = yield* ScriptedAgentWallet
      const { cardId, token } = yield* cardHolder()
      yield* putStrategy(token, strategy)
      for (const code of ["SESSION_EXPIRED", "NOT_LOGGED_IN", "AGENT_WALLET_ERROR"] as const) {
        yield* wallet.failWith(cardId, Option.some(code))
        const response = yield* send("GET", "/portfolio", { headers: bearer(token) })
        expect(response.status).toBe(502)
        expect(response.body.code).toBe(code)
        expect((yield* send("GET", "/agent/preview", { headers: bearer(token) })).body.code).toBe(code)
      }
      yield* wallet.failWith(cardId, Option.none())
      yield* wallet.hang(cardId, true)
      const hung = yield* send("GET", "/portfolio", { headers: bearer(token) })
      expect(hung.status).toBe(502)
      expect(hung.body).toEqual({ error: expect.stringContaining("did not answer"), code: "AGENT_WALLET_ERROR" })
      yield* wallet.hang(cardId, false)

      yield* wallet.setSession({ connected: true, expiresAt: 1_900_000_000_000 })
      expect((yield* send("GET", "/agent/session")).body).toEqual({ connected: true, expiresAt: 1_900_000_000_000 })
      yield* wallet.failWith("*", Option.some("SESSION_EXPIRED"))
      expect((yield* send("GET", "/agent/session")).body.code).toBe("SESSION_EXPIRED")
      yield* wallet.failWith("*", Option.none())
    })
  )
})

/** The demo card an operator makes public: its holder's key is known before the service starts. */
const demoHolder = newAccount()

layer(
  testServer(
    { AGENT_MODE: "dry", AGENT_POLL: "24 hours", AGENT_PUBLIC_CARD: demoHolder.address.toLowerCase() },
    ports()
  ),
  { excludeTestServices: true }
)("a card made public (AGENT_PUBLIC_CARD)", (it) => {
  it.effect("answers the seed's anonymous reads; a token still means the caller's own", () =>
    Effect.gen(function* () {
      // Named before it exists: 409 until the holder has a card (404 means only that the agent is off).
      const early = yield* send("GET", "/portfolio")
      expect(early.status).toBe(409)
      expect(early.body).toEqual({
        error: expect.stringContaining("AGENT_PUBLIC_CARD names no card"),
        code: "NO_AGENT_ACCOUNT"
      })

      const demo = yield* cardHolder("Demo Holder", demoHolder)
      expect((yield* putStrategy(demo.token, strategy)).status).toBe(200)
      const other = yield* cardHolder("Other Holder")
      for (const path of ["/portfolio", "/agent/preview", "/agent/decisions"]) {
        expect((yield* send("GET", path)).status, path).toBe(200)
      }
      expect((yield* send("GET", "/portfolio")).body.card.address).toBe(demoHolder.address)
      const own = yield* send("GET", "/portfolio", { headers: bearer(other.token) })
      expect(own.body.card.address).toBe(other.account.address)
      expect((yield* send("GET", "/portfolio", { headers: bearer("not-a-valid-token") })).status).toBe(401)
    })
  )
})

layer(
  testServer(
    { AGENT_MODE: "dry", PRICE_READ_TIMEOUT: "300 millis", PRICE_MAX_STALENESS: "1" },
    { ...ports(), priceFeed: ScriptedPriceFeed.layer() }
  ),
  { excludeTestServices: true }
)("a price source that hangs", (it) => {
  it.effect("the portfolio answers 502 PRICE_UNAVAILABLE within the read bound", () =>
    Effect.gen(function* () {
      const feed = yield* ScriptedPriceFeed
      const { token } = yield* cardHolder()
      yield* putStrategy(token, strategy)
      yield* Ref.set(feed.behaviour, "hang")
      const response = yield* send("GET", "/portfolio", { headers: bearer(token) })
      expect(response.status).toBe(502)
      expect(response.body.code).toBe("PRICE_UNAVAILABLE")
    })
  )
})

describe("AGENT_MODE=off", () => {
  layer(testServer({}, ports()), { excludeTestServices: true })("the agent's endpoints", (it) => {
    it.effect("are 404 saying the agent is off, and absent from /openapi.json; the strategy is served", () =>
      Effect.gen(function* () {
        for (const path of ["/portfolio", "/agent/preview", "/agent/decisions", "/agent/session"]) {
          const response = yield* send("GET", path)
          expect(response.status).toBe(404)
          expect(response.body).toEqual({ error: expect.stringContaining("AGENT_MODE"), code: "NOT_FOUND" })
        }
        const spec = (yield* send("GET", "/openapi.json")).body
        expect(Object.keys(spec.paths)).toContain("/strategy")
        expect(Object.keys(spec.paths)).not.toContain("/portfolio")
        const { token } = yield* cardHolder()
        expect((yield* putStrategy(token, strategy)).status).toBe(200)
      })
    )
  })
})
