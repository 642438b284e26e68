import { expect, layer } from "@effect/vitest"
import { Validator } from "@seriousme/openapi-schema-validator"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

layer(testServer({}, { chain: InMemoryChain.layer() }), { excludeTestServices: true })("OpenAPI and docs", (it) => {
  it.effect("/openapi.json is valid OpenAPI 3.1.0 and lists every implemented path", () =>
    Effect.gen(function* () {
      const { status, body: spec } = yield* send("GET", "/openapi.json")
      expect(status).toBe(200)
      expect(spec.openapi).toBe("3.1.0")
      expect(spec.info.version).toBe("1.0.0")
      const result = yield* Effect.promise(() => new Validator().validate(spec))
      expect(result.errors).toBeUndefined()
      expect(result.valid).toBe(true)
      expect(Object.keys(spec.paths).sort()).toEqual(
        [
          "/auth/challenge",
          "/auth/signout",
          "/auth/verify",
          "/card/allowance",
          "/card/allowance/request",
          "/card/authorizations",
          "/card/controls",
          "/card/replace",
          "/card-network/messages",
          // The sandbox card network is the card network by default.
          "/sandbox/card-network/authorizations",
          "/sandbox/card-network/authorizations/{id}/clear",
          "/sandbox/card-network/authorizations/{id}/expire",
          "/sandbox/card-network/authorizations/{id}/increment",
          "/sandbox/card-network/authorizations/{id}/refund",
          "/sandbox/card-network/authorizations/{id}/reverse",
          // The in-memory chain mints, as the embedded devnet does.
          "/devnet/faucet",
          "/health",
          "/kyc/return",
          "/kyc/sandbox/{sessionId}",
          "/kyc/session",
          "/kyc/webhook/{provider}",
          "/market/status",
          "/market/tokens",
          "/market/tokens/{token}",
          "/me",
          "/me/activity",
          "/me/events",
          "/ready",
          "/strategy"
        ].sort()
      )
      const text = JSON.stringify(spec)
      expect(text).not.toContain("HttpApiDecodeError")
      expect(text).not.toContain("_tag")
      // Errors are documented with their codes.
      expect(spec.paths["/auth/verify"].post.responses["401"]).toHaveProperty(["content", "application/json"])
      expect(spec.components.schemas.BadRequest.properties.code.enum).toEqual(["BAD_REQUEST"])
      expect(spec.paths["/me"].get.security).toEqual([{ bearer: [] }])
    })
  )

  it.effect("/docs serves a browsable reference", () =>
    Effect.gen(function* () {
      const response = yield* send("GET", "/docs")
      expect(response.status).toBe(200)
      expect(response.headers["content-type"]).toContain("text/html")
      expect(String(response.body)).toContain("openapi")
    })
  )
})

layer(testServer({ MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD" }, { chain: InMemoryChain.layer() }), {
  excludeTestServices: true
})("OpenAPI with the merchant", (it) => {
  it.effect("lists the merchant paths, still valid OpenAPI 3.1", () =>
    Effect.gen(function* () {
      const { body: spec } = yield* send("GET", "/openapi.json")
      const result = yield* Effect.promise(() => new Validator().validate(spec))
      expect(result.errors).toBeUndefined()
      expect(Object.keys(spec.paths)).toEqual(
        expect.arrayContaining(["/merchant/orders", "/merchant/orders/{id}", "/merchant/orders/{id}/pay"])
      )
      const pay = spec.paths["/merchant/orders/{id}/pay"]
      expect(Object.keys(pay).sort()).toEqual(["get", "post"])
      expect(pay.post.responses["402"]).toHaveProperty(["content", "application/json"])
      expect(pay.post.responses["409"]).toHaveProperty(["content", "application/json"])
    })
  )
})
