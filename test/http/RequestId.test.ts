/**
 * The request pipeline's per-request tags on the real server: the request id on the lines logged
 * inside the request (set once on the request's fibre, never leaking into another request's), and
 * the CORS headers of a single allowed origin (made once, shared by every answer).
 */
import { expect, layer } from "@effect/vitest"
import { Effect, HashMap, Layer, Logger, Option } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { signIn } from "../support/auth.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

const logged: Array<{ readonly message: string; readonly requestId: unknown }> = []
const CaptureLogs = Logger.add(
  Logger.make(({ message, annotations }) => {
    logged.push({ message: String(message), requestId: Option.getOrUndefined(HashMap.get(annotations, "requestId")) })
  })
)

const ORIGIN = "https://app.example.com"

layer(
  testServer(
    {
      WEB_ORIGIN: ORIGIN,
      KYC_PROVIDER: "didit",
      DIDIT_API_KEY: "test-key",
      DIDIT_WEBHOOK_SECRET: "test-webhook-secret",
      DIDIT_WORKFLOW_ID: "test-workflow",
      DIDIT_BASE_URL: "http://127.0.0.1:9"
    },
    { chain: InMemoryChain.layer() }
  ).pipe(Layer.provide(CaptureLogs)),
  {
    excludeTestServices: true
  }
)("request tags", (it) => {
  it.effect("a line logged inside a request carries that request's id, the caller's or a fresh one", () =>
    Effect.gen(function* () {
      const { token } = yield* signIn()
      const failing = (headers: Record<string, string>) =>
        send("POST", "/kyc/session", { headers: { authorization: `Bearer ${token}`, ...headers } })
      const given = yield* failing({ "x-request-id": "trace-one" })
      const fresh = yield* failing({})
      expect([given.status, fresh.status]).toEqual([502, 502])
      expect(fresh.headers["x-request-id"]).toMatch(/^[0-9a-f]{8}(-[0-9a-f]{4}){3}-[0-9a-f]{12}$/)
      // The identity provider (nothing listens there) failed inside each request, which logged it.
      const failures = logged.filter((line) => line.message.startsWith("Didit createSession failed"))
      expect(failures.map((line) => line.requestId)).toEqual(["trace-one", fresh.headers["x-request-id"]])
    })
  )

  it.effect("one allowed origin: every answer names it, whoever asks, and carries nothing of another answer", () =>
    Effect.gen(function* () {
      for (const origin of [ORIGIN, "https://evil.example.com", undefined]) {
        const answer = yield* send("GET", "/health", origin === undefined ? {} : { headers: { origin } })
        expect(answer.headers["access-control-allow-origin"]).toBe(ORIGIN)
        expect(answer.headers.vary).toBe("Origin")
        expect(answer.headers["access-control-expose-headers"]).toContain("payment-required")
        expect(answer.headers["x-content-type-options"]).toBe("nosniff")
      }
      const first = yield* send("GET", "/health", { headers: { "x-request-id": "first" } })
      const second = yield* send("GET", "/no/such/route")
      expect([first.headers["x-request-id"], second.status]).toEqual(["first", 404])
      expect(second.headers["x-request-id"]).not.toBe("first")
      expect(second.headers["access-control-allow-origin"]).toBe(ORIGIN)
    })
  )
})
