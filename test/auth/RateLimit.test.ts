import { HttpServerRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { RateLimiter } from "../../src/http/RateLimit.js"
import { newAccount } from "../support/auth.js"
import { send } from "../support/http.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { testServer } from "../support/TestServer.js"

/**
 * The limits count per fixed minute: requests that straddle its turn are counted in two windows and
 * are not refused (it happened once, in a run of the suite on a loaded machine). Started within 20 s
 * of the turn, a check waits for it first.
 */
const awayFromTheMinutesTurn = Effect.suspend(() => {
  const left = 60_000 - (Date.now() % 60_000)
  return left < 20_000 ? Effect.sleep(left + 50) : Effect.void
})

layer(
  testServer(
    {
      RATE_LIMIT_SIGNIN: "3",
      RATE_LIMIT_ORDERS: "2",
      MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD",
      TRUST_PROXY: "true"
    },
    { chain: InMemoryChain.layer() }
  ),
  { excludeTestServices: true }
)("rate limits", (it) => {
  it.effect("sign-in calls past RATE_LIMIT_SIGNIN a minute are 429 RATE_LIMITED with Retry-After", () =>
    Effect.gen(function* () {
      const address = newAccount().address
      yield* awayFromTheMinutesTurn
      for (let i = 0; i < 3; i++) {
        expect((yield* send("POST", "/auth/challenge", { json: { address } })).status).toBe(200)
      }
      const limited = yield* send("POST", "/auth/challenge", { json: { address } })
      expect(limited.status).toBe(429)
      expect(limited.body).toEqual({ error: expect.stringContaining("too many requests"), code: "RATE_LIMITED" })
      const retryAfter = Number(limited.headers["retry-after"])
      expect(retryAfter).toBeGreaterThan(0)
      expect(retryAfter).toBeLessThanOrEqual(60)
      // Verification counts against the same budget.
      const verify = yield* send("POST", "/auth/verify", { json: { message: "x", signature: "0x00" } })
      expect(verify.status).toBe(429)
    })
  )

  it.effect("order creation past RATE_LIMIT_ORDERS a minute is 429, and other endpoints are unaffected", () =>
    Effect.gen(function* () {
      const order = { amount: "1", description: "limited" }
      yield* awayFromTheMinutesTurn
      expect((yield* send("POST", "/merchant/orders", { json: order })).status).toBe(200)
      expect((yield* send("POST", "/merchant/orders", { json: order })).status).toBe(200)
      const limited = yield* send("POST", "/merchant/orders", { json: order })
      expect(limited.status).toBe(429)
      expect(limited.body.code).toBe("RATE_LIMITED")
      expect((yield* send("GET", "/health")).status).toBe(200)
    })
  )

  it.effect(
    "an IPv6 client is its /64: other addresses of the network share its limit, another network has its own",
    () =>
      Effect.gen(function* () {
        const address = newAccount().address
        const from = (client: string) =>
          send("POST", "/auth/challenge", { json: { address }, headers: { "x-forwarded-for": client } }).pipe(
            Effect.map((response) => response.status)
          )
        yield* awayFromTheMinutesTurn
        const network = ["2001:db8:40:1::1", "2001:db8:40:1:ffff::2", "2001:DB8:40:1:0:0:0:3"]
        expect(yield* Effect.forEach(network, from)).toEqual([200, 200, 200])
        expect(yield* from("2001:db8:40:1:abcd::4")).toBe(429)
        expect(yield* from("2001:db8:40:2::1")).toBe(200)
      })
  )
})

/** One replica's limiter: its own instance (own memory, own sync loop) on the shared database. */
const replica = Layer.build(Layer.fresh(RateLimiter.Default)).pipe(Effect.map(Context.get(RateLimiter)))

const request = HttpServerRequest.fromWeb(new Request("http://localhost/auth/challenge", { method: "POST" }))

/** One sign-in request through `limiter`: 200 or 429, as the endpoint would answer. */
const hit = (limiter: RateLimiter) =>
  limiter
    .consume("signin")
    .pipe(
      Effect.provideService(HttpServerRequest.HttpServerRequest, request),
      Effect.match({ onFailure: (error) => (error._tag === "RateLimited" ? 429 : error._tag), onSuccess: () => 200 })
    )

// The test clock stands still, so the replicas' own sync loops (first tick one interval after
// start) never run here: every sync is the one the test forces.
layer(
  TestDatabase.pipe(
    Layer.provideMerge(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["RATE_LIMIT_SIGNIN", "3"]]))))
  )
)("rate limits across replicas", (it) => {
  it.scoped("two replicas on one database hold one limit, each within one sync of the other's hits", () =>
    Effect.gen(function* () {
      const a = yield* replica
      const b = yield* replica
      expect([yield* hit(a), yield* hit(a), yield* hit(b)]).toEqual([200, 200, 200])
      yield* a.sync
      yield* b.sync
      // b has seen 1 hit itself, but its sync read the shared 3.
      expect(yield* hit(b)).toBe(429)
      // a's view is as of its own sync (2): one more hit gets through, the bound the docs state,
      // and its next sync closes the window for it too.
      expect(yield* hit(a)).toBe(200)
      yield* a.sync
      expect(yield* hit(a)).toBe(429)
      yield* a.sync
      yield* b.sync
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ bucket: string; hits: number }>`SELECT bucket, hits FROM rate_limit_hits`
      expect(rows).toEqual([{ bucket: "signin:unknown", hits: 6 }])
    })
  )

  it.scoped("hits are counted once however often a replica syncs, and an idle replica writes nothing", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`DELETE FROM rate_limit_hits`
      const a = yield* replica
      yield* a.sync
      expect(yield* sql`SELECT * FROM rate_limit_hits`).toEqual([])
      yield* hit(a)
      yield* a.sync
      yield* a.sync
      yield* hit(a)
      yield* a.sync
      const rows = yield* sql<{ hits: number }>`SELECT hits FROM rate_limit_hits`
      expect(rows).toEqual([{ hits: 2 }])
    })
  )
})
