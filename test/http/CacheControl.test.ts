/**
 * No cache keeps an answer of the API: every operation of the OpenAPI document is called for real
 * (signed in as a card holder where it reads an account, with every part on) and its answer says
 * `Cache-Control: no-store`, as its responses in the document say. An operation added to the API
 * without a request here fails the walk.
 */
import { randomBytes } from "node:crypto"
import type { HttpClient, HttpServer } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { ScriptedAgentWallet } from "../../src/agent/ScriptedAgentWallet.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import {
  approve,
  deliverSandbox,
  kycEnv,
  openSandboxSession,
  sandboxEvent,
  serverBaseUrl,
  submitSandbox
} from "../kyc/helpers.js"
import { signIn } from "../support/auth.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { type Offer, signPayment } from "../support/x402.js"

interface Answered {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
}

const server = testServer(
  kycEnv({ MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD", AGENT_MODE: "dry", AGENT_POLL: "24 hours" }),
  { chain: InMemoryChain.layer(), agentWallet: ScriptedAgentWallet.layer() }
)

/** The stream's status and headers, read as a browser's fetch does; the stream is then let go. */
const openStream = (token: string) =>
  Effect.flatMap(serverBaseUrl, (base) =>
    Effect.promise(async (): Promise<Answered> => {
      const controller = new AbortController()
      const response = await fetch(`${base}/me/events`, { headers: bearer(token), signal: controller.signal })
      controller.abort()
      return { status: response.status, headers: Object.fromEntries(response.headers) }
    })
  )

layer(server, { excludeTestServices: true, timeout: "120 seconds" })("Cache-Control", (it) => {
  it.effect("every operation of the OpenAPI document answers Cache-Control: no-store, as it documents", () =>
    Effect.gen(function* () {
      const spec = (yield* send("GET", "/openapi.json")).body
      const chain = yield* InMemoryChain

      // A card holder, through the sandbox provider's page; a second user whose check is under way.
      const holder = yield* signIn()
      const session = yield* openSandboxSession(holder.token)
      expect((yield* approve(session, "Ada Lovelace", `DOC-${randomBytes(6).toString("hex")}`)).status).toBe(303)
      yield* eventually(
        "the holder's card",
        send("GET", "/me", { headers: bearer(holder.token) }),
        (me) => me.body.card !== null
      )
      const strategy = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 70 }
      expect((yield* send("PUT", "/strategy", { headers: bearer(holder.token), json: strategy })).status).toBe(200)
      yield* chain.mint(chain.usd1.address, holder.account.address, parseUnits("10", 18))
      const applicant = yield* signIn()
      const applicantSession = yield* openSandboxSession(applicant.token)
      const leaving = yield* signIn()
      const order = (yield* send("POST", "/merchant/orders", { json: { amount: "1.5", description: "Tea" } })).body
      const offer: Offer = (yield* send("GET", `/merchant/orders/${order.id}/pay`)).body
      const payment = yield* Effect.promise(() => signPayment(holder.account, offer))

      const asHolder = { headers: bearer(holder.token) }
      const card = (yield* send("GET", "/me", asHolder)).body.card
      const unknownAuthorization = "/sandbox/card-network/authorizations/00000000-0000-4000-8000-000000000000"
      /** A real request of each operation, and the statuses it may answer. */
      const requests: Record<
        string,
        readonly [Effect.Effect<Answered, never, HttpClient.HttpClient | HttpServer.HttpServer>, ReadonlyArray<number>]
      > = {
        "GET /health": [send("GET", "/health"), [200]],
        "GET /ready": [send("GET", "/ready"), [200]],
        "POST /auth/challenge": [send("POST", "/auth/challenge", { json: { address: holder.account.address } }), [200]],
        "POST /auth/verify": [
          Effect.gen(function* () {
            const { message } = (yield* send("POST", "/auth/challenge", { json: { address: holder.account.address } }))
              .body
            const signature = yield* Effect.promise(() => holder.account.signMessage({ message }))
            return yield* send("POST", "/auth/verify", { json: { message, signature } })
          }),
          [200]
        ],
        "POST /auth/signout": [send("POST", "/auth/signout", { headers: bearer(leaving.token) }), [204]],
        "GET /me": [send("GET", "/me", asHolder), [200]],
        "POST /kyc/session": [send("POST", "/kyc/session", { headers: bearer(applicant.token) }), [200]],
        "GET /kyc/sandbox/{sessionId}": [send("GET", `/kyc/sandbox/${applicantSession}`), [200]],
        "POST /kyc/sandbox/{sessionId}": [
          submitSandbox(applicantSession, { fullName: "Grace Hopper", documentNumber: "GH-1906", outcome: "decline" }),
          [303]
        ],
        "POST /kyc/webhook/{provider}": [
          deliverSandbox(sandboxEvent({ sessionId: applicantSession, status: "declined" })),
          [200, 204]
        ],
        "GET /me/activity": [send("GET", "/me/activity", asHolder), [200]],
        "GET /me/events": [openStream(holder.token), [200]],
        "PUT /strategy": [send("PUT", "/strategy", { ...asHolder, json: strategy }), [200]],
        "GET /strategy": [send("GET", "/strategy", asHolder), [200]],
        "GET /portfolio": [send("GET", "/portfolio", asHolder), [200]],
        "GET /agent/preview": [send("GET", "/agent/preview", asHolder), [200]],
        "GET /agent/decisions": [send("GET", "/agent/decisions", asHolder), [200]],
        "GET /agent/session": [send("GET", "/agent/session", asHolder), [200]],
        "POST /merchant/orders": [
          send("POST", "/merchant/orders", { json: { amount: "2", description: "Jam" } }),
          [200]
        ],
        "GET /merchant/orders/{id}": [send("GET", `/merchant/orders/${order.id}`), [200]],
        "GET /merchant/orders/{id}/pay": [send("GET", `/merchant/orders/${order.id}/pay`), [402]],
        "POST /merchant/orders/{id}/pay": [
          send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "payment-signature": payment.header } }),
          [200]
        ],
        "GET /market/status": [send("GET", "/market/status"), [200]],
        "GET /market/tokens": [send("GET", "/market/tokens"), [200]],
        "GET /market/tokens/{token}": [send("GET", "/market/tokens/NVDA"), [200]],
        "POST /devnet/faucet": [send("POST", "/devnet/faucet", asHolder), [200]],
        "GET /kyc/return": [send("GET", `/kyc/return?user=${holder.account.address}`), [303]],
        "GET /card/controls": [send("GET", "/card/controls", asHolder), [200]],
        "PUT /card/controls": [send("PUT", "/card/controls", { ...asHolder, json: { frozen: false } }), [200]],
        "POST /card/replace": [send("POST", "/card/replace", asHolder), [200]],
        "GET /card/authorizations": [send("GET", "/card/authorizations", asHolder), [200]],
        "GET /card/allowance": [send("GET", "/card/allowance", asHolder), [200]],
        "POST /card/allowance/request": [
          send("POST", "/card/allowance/request", { ...asHolder, json: { capUsd: 10, validDays: 1 } }),
          [200]
        ],
        // Nothing requested since (the request above is answered first): refused, and not kept.
        "POST /card/allowance": [
          send("POST", "/card/allowance", { ...asHolder, json: { signature: `0x${"11".repeat(65)}` } }),
          [400, 409]
        ],
        // Unsigned: refused, and the refusal is not kept either.
        "POST /card-network/messages": [send("POST", "/card-network/messages", { json: {} }), [401]],
        "POST /sandbox/card-network/authorizations": [
          send("POST", "/sandbox/card-network/authorizations", {
            json: {
              cardNumber: card.number,
              expiry: card.expiry,
              cvv: card.cvv,
              amountUsd: "1.00",
              merchant: { name: "Tea", mcc: "5814", country: "USA" }
            }
          }),
          [200]
        ],
        "POST /sandbox/card-network/authorizations/{id}/increment": [
          send("POST", `${unknownAuthorization}/increment`, { json: { amountUsd: "1.00" } }),
          [404]
        ],
        "POST /sandbox/card-network/authorizations/{id}/reverse": [
          send("POST", `${unknownAuthorization}/reverse`, { json: {} }),
          [404]
        ],
        "POST /sandbox/card-network/authorizations/{id}/clear": [
          send("POST", `${unknownAuthorization}/clear`, { json: {} }),
          [404]
        ],
        "POST /sandbox/card-network/authorizations/{id}/refund": [
          send("POST", `${unknownAuthorization}/refund`, { json: { amountUsd: "1.00" } }),
          [404]
        ],
        "POST /sandbox/card-network/authorizations/{id}/expire": [send("POST", `${unknownAuthorization}/expire`), [404]]
      }

      const documented = Object.entries(spec.paths).flatMap(([path, item]) =>
        Object.entries(item as Record<string, { responses: Record<string, { headers: object }> }>).map(
          ([method, operation]) => ({ operation: `${method.toUpperCase()} ${path}`, responses: operation.responses })
        )
      )
      expect(Object.keys(requests).sort()).toEqual(documented.map(({ operation }) => operation).sort())
      for (const { operation, responses } of documented) {
        const [request, statuses] = requests[operation]!
        const answer = yield* request
        expect(statuses, operation).toContain(answer.status)
        expect(answer.headers["cache-control"], operation).toBe("no-store")
        for (const [status, response] of Object.entries(responses)) {
          expect(response.headers, `${operation} ${status}`).toHaveProperty("Cache-Control")
        }
      }
    })
  )

  it.effect("GET /me, with the card's number and CVV, and its refusal say no-store", () =>
    Effect.gen(function* () {
      const holder = yield* signIn()
      const session = yield* openSandboxSession(holder.token)
      yield* approve(session, "Ada Lovelace", `DOC-${randomBytes(6).toString("hex")}`)
      const me = yield* eventually(
        "the card on /me",
        send("GET", "/me", { headers: bearer(holder.token) }),
        (answer) => answer.body.card !== null
      )
      expect(me.body.card).toMatchObject({ number: expect.stringMatching(/^\d{16}$/), cvv: expect.any(String) })
      expect(me.headers["cache-control"]).toBe("no-store")
      const refused = yield* send("GET", "/me", { headers: bearer("not-a-token") })
      expect(refused.status).toBe(401)
      expect(refused.headers["cache-control"]).toBe("no-store")
    })
  )
})
