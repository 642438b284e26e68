import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

layer(
  testServer({ WEB_ORIGIN: "https://app.example.com,https://shop.example.com" }, { chain: InMemoryChain.layer() }),
  { excludeTestServices: true }
)("CORS", (it) => {
  it.effect("allows only WEB_ORIGIN origins, the x402 headers and bearer tokens", () =>
    Effect.gen(function* () {
      const preflight = yield* send("OPTIONS", "/auth/verify", {
        headers: {
          origin: "https://shop.example.com",
          "access-control-request-method": "POST",
          "access-control-request-headers": "payment-signature, authorization, access-control-expose-headers"
        }
      })
      expect(preflight.status).toBe(204)
      expect(preflight.headers["access-control-allow-origin"]).toBe("https://shop.example.com")
      expect(preflight.headers["access-control-allow-headers"]).toContain("payment-signature")
      expect(preflight.headers["access-control-allow-headers"]).toContain("authorization")
      expect(preflight.headers["access-control-allow-headers"]).toContain("access-control-expose-headers")

      const allowed = yield* send("GET", "/health", { headers: { origin: "https://app.example.com" } })
      expect(allowed.headers["access-control-allow-origin"]).toBe("https://app.example.com")
      expect(allowed.headers["access-control-expose-headers"]).toContain("payment-required")
      expect(allowed.headers["access-control-expose-headers"]).toContain("payment-response")

      for (const origin of ["https://evil.example.com", "https://app.example.com.evil.com", "null"]) {
        const refused = yield* send("GET", "/health", { headers: { origin } })
        expect(refused.headers["access-control-allow-origin"], origin).toBeUndefined()
      }
    })
  )

  it.effect("an error the API answers carries CORS too, as do a body it read and a body it refused", () =>
    Effect.gen(function* () {
      const origin = "https://app.example.com"
      const unauthorized = yield* send("GET", "/me", { headers: { origin } })
      expect(unauthorized.status).toBe(401)
      expect(unauthorized.headers["access-control-allow-origin"]).toBe(origin)
      expect(unauthorized.headers["access-control-expose-headers"]).toContain("www-authenticate")
      expect(unauthorized.headers["x-request-id"]).toMatch(/^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/)

      const challenge = yield* send("POST", "/auth/challenge", {
        json: { address: "0x000000000000000000000000000000000000dEaD" },
        headers: { origin }
      })
      expect(challenge.status).toBe(200)
      expect(challenge.headers["access-control-allow-origin"]).toBe(origin)
      expect(challenge.headers.vary).toBe("Origin")

      // Refused before the API reads it: the browser can still read why.
      const malformed = yield* send("POST", "/auth/challenge", { text: "{not json", headers: { origin } })
      expect(malformed.status).toBe(400)
      expect(malformed.body.code).toBe("BAD_REQUEST")
      expect(malformed.body.error).toBe("the request body is not valid JSON")
      expect(malformed.headers["access-control-allow-origin"]).toBe(origin)
    })
  )
})
