import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { newAccount } from "../support/auth.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

layer(
  testServer(
    {
      RATE_LIMIT_SIGNIN: "3",
      RATE_LIMIT_ORDERS: "2",
      MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD"
    },
    { chain: InMemoryChain.layer() }
  ),
  { excludeTestServices: true }
)("rate limits", (it) => {
  it.effect("sign-in calls past RATE_LIMIT_SIGNIN a minute are 429 RATE_LIMITED with Retry-After", () =>
    Effect.gen(function* () {
      const address = newAccount().address
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
      // The count lives in the database, where every replica sees it.
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ bucket: string; hits: number }>`SELECT bucket, hits FROM rate_limit_hits`
      expect(rows.find((row) => row.bucket.startsWith("signin:"))?.hits).toBe(5)
    })
  )

  it.effect("order creation past RATE_LIMIT_ORDERS a minute is 429, and other endpoints are unaffected", () =>
    Effect.gen(function* () {
      const order = { amount: "1", description: "limited" }
      expect((yield* send("POST", "/merchant/orders", { json: order })).status).toBe(200)
      expect((yield* send("POST", "/merchant/orders", { json: order })).status).toBe(200)
      const limited = yield* send("POST", "/merchant/orders", { json: order })
      expect(limited.status).toBe(429)
      expect(limited.body.code).toBe("RATE_LIMITED")
      expect((yield* send("GET", "/health")).status).toBe(200)
    })
  )
})
