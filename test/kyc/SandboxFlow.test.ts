/**
 * The identity check end to end over HTTP with the built-in sandbox provider: the page's form is
 * submitted as a browser would, the sandbox delivers its signed webhook to the server over HTTP,
 * and the result shows on GET /me and in the sign-in result.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { isLuhnValid } from "../../src/cards/Luhn.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { bearer, send } from "../support/http.js"
import { TEST_APP_URL, testServer } from "../support/TestServer.js"
import {
  approve,
  backFromProvider,
  cardCount,
  kycEnv,
  kycRow,
  me,
  openSandboxSession,
  query,
  sandboxSessionId,
  sessionRows,
  signIn,
  startSession,
  submitSandbox
} from "./helpers.js"

const RETURN = `${TEST_APP_URL}/kyc/done?step=2`

const expectedExpiry = () => {
  const now = new Date()
  return `${String(now.getUTCMonth() + 1).padStart(2, "0")}/${String((now.getUTCFullYear() + 3) % 100).padStart(2, "0")}`
}

layer(testServer(kycEnv(), { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "identity check with the sandbox provider",
  (it) => {
    it.effect("approve: pending while open, then approved with a card holding the typed name", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const started = yield* startSession(token, { returnUrl: RETURN })
        expect(started.status).toBe(200)
        expect(started.body.url).toMatch(new RegExp(`^${TEST_APP_URL}/kyc/sandbox/[A-Za-z0-9_-]{22}$`))
        const sessionId = sandboxSessionId(started.body.url)
        expect(yield* me(token)).toMatchObject({ kyc: "pending", card: null })

        const page = yield* send("GET", `/kyc/sandbox/${sessionId}`)
        expect(page.status).toBe(200)
        expect(page.headers["content-type"]).toContain("text/html")
        expect(page.headers["content-security-policy"]).toBe(
          "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
        )
        expect(page.headers["x-content-type-options"]).toBe("nosniff")
        expect(String(page.body)).toContain('name="fullName"')
        expect(String(page.body)).toContain('value="approve"')

        const approvedFrom = Date.now()
        const submitted = yield* approve(sessionId, "  Ada   King Lovelace ", "X1234567")
        expect(submitted.status).toBe(303)
        // The provider sends the person to this service, which sends them on to the return URL.
        expect(submitted.headers.location).toBe(`${TEST_APP_URL}/kyc/return?user=${account.address}`)
        expect(yield* backFromProvider(submitted.headers.location!)).toBe(RETURN)

        const after = yield* me(token)
        expect(after.kyc).toBe("approved")
        expect(after.card).toMatchObject({ address: account.address, holder: "Ada King Lovelace" })
        expect(after.card.number).toMatch(/^9406\d{12}$/)
        expect(isLuhnValid(after.card.number)).toBe(true)
        expect(after.card.cvv).toMatch(/^\d{3}$/)
        expect(after.card.expiry).toBe(expectedExpiry())
        // Milliseconds since the epoch, taken when the approval issued the card.
        expect(after.card.createdAt).toBeGreaterThanOrEqual(approvedFrom)
        expect(after.card.createdAt).toBeLessThanOrEqual(Date.now())

        // The result arrived through the signed webhook: exactly one delivery was recorded.
        const deliveries = yield* query<{ n: number }>(
          "SELECT count(*)::int AS n FROM kyc_webhook_deliveries WHERE provider = 'sandbox' AND session_id = $1",
          sessionId
        )
        expect(deliveries[0]!.n).toBe(1)
        expect(yield* sessionRows(account.address)).toEqual([{ sessionId, status: "approved", returnUrl: RETURN }])
        expect(yield* cardCount(account.address)).toBe(1)

        const again = yield* startSession(token)
        expect(again.status).toBe(409)
        expect(again.body).toEqual({ error: expect.any(String), code: "KYC_ALREADY_APPROVED" })

        // A later sign-in carries the same state and card.
        const { result } = yield* signIn(account)
        expect(result.kyc).toBe("approved")
        expect(result.card).toEqual(after.card)
      })
    )

    it.effect("decline, then retry with a new session, then approve", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const first = yield* openSandboxSession(token, { returnUrl: RETURN })
        const declined = yield* submitSandbox(first, { fullName: "", documentNumber: "", outcome: "decline" })
        expect(declined.status).toBe(303)
        expect(yield* me(token)).toMatchObject({ kyc: "declined", card: null })

        const second = yield* openSandboxSession(token)
        expect(second).not.toBe(first)
        expect(yield* me(token)).toMatchObject({ kyc: "pending", card: null })
        expect((yield* approve(second, "Grace Hopper", "GH-1906-12")).status).toBe(303)
        const after = yield* me(token)
        expect(after).toMatchObject({ kyc: "approved", card: { holder: "Grace Hopper" } })
        expect((yield* sessionRows(account.address)).map((row) => row.status)).toEqual(["declined", "approved"])
      })
    )

    it.effect("a document that already holds a card makes a second user's check duplicate, with no card", () =>
      Effect.gen(function* () {
        const first = yield* signIn()
        expect((yield* approve(yield* openSandboxSession(first.token), "Alan Turing", "AT 123-456")).status).toBe(303)
        expect((yield* me(first.token)).kyc).toBe("approved")

        const second = yield* signIn()
        // The same document written differently: case, spaces and dashes do not matter.
        expect((yield* approve(yield* openSandboxSession(second.token), "Someone Else", "at123456")).status).toBe(303)
        expect(yield* me(second.token)).toMatchObject({ kyc: "duplicate", card: null })
        expect(yield* cardCount(second.account.address)).toBe(0)
        expect((yield* kycRow(second.account.address))!.status).toBe("duplicate")
        const retry = yield* startSession(second.token)
        expect(retry.status).toBe(409)
        expect(retry.body).toEqual({ error: expect.any(String), code: "KYC_DUPLICATE" })
        // The first user keeps the card.
        expect((yield* me(first.token)).card.holder).toBe("Alan Turing")
      })
    )

    it.effect("the provider's own duplicate verdict is duplicate too", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const sessionId = yield* openSandboxSession(token)
        expect(
          (yield* submitSandbox(sessionId, { fullName: "", documentNumber: "", outcome: "duplicate" })).status
        ).toBe(303)
        expect(yield* me(token)).toMatchObject({ kyc: "duplicate", card: null })
        expect(yield* cardCount(account.address)).toBe(0)
      })
    )

    it.effect("abandon returns to none, and a new check can start", () =>
      Effect.gen(function* () {
        const { token } = yield* signIn()
        const first = yield* openSandboxSession(token)
        expect((yield* submitSandbox(first, { outcome: "abandon" })).status).toBe(303)
        expect(yield* me(token)).toMatchObject({ kyc: "none", card: null })
        const second = yield* openSandboxSession(token)
        expect(second).not.toBe(first)
        expect((yield* me(token)).kyc).toBe("pending")
      })
    )

    it.effect("while pending, POST /kyc/session answers the same session, also under concurrency", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const responses = yield* Effect.all(
          Array.from({ length: 6 }, () => startSession(token, { returnUrl: RETURN })),
          { concurrency: "unbounded" }
        )
        expect(responses.map((r) => r.status)).toEqual([200, 200, 200, 200, 200, 200])
        expect(new Set(responses.map((r) => r.body.url)).size).toBe(1)
        const again = yield* startSession(token)
        expect(again.body.url).toBe(responses[0]!.body.url)
        expect(yield* sessionRows(account.address)).toHaveLength(1)
      })
    )

    it.effect("again while pending: the same page, and a returnUrl on a WEB_ORIGIN replaces the way back", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const first = yield* startSession(token, { returnUrl: RETURN })
        const sessionId = sandboxSessionId(first.body.url)
        const wayBack = () => sessionRows(account.address).pipe(Effect.map((rows) => rows.map((row) => row.returnUrl)))
        const moved = `${TEST_APP_URL}/kyc/resumed`
        const again = yield* startSession(token, { returnUrl: moved })
        expect(again).toMatchObject({ status: 200, body: { url: first.body.url } })
        expect(yield* wayBack()).toEqual([moved])
        // Absent, or not on a WEB_ORIGIN origin: the way back stays (it is not reset to APP_URL/).
        for (const body of [undefined, {}, { returnUrl: "https://evil.example/" }]) {
          expect((yield* startSession(token, body)).body.url).toBe(first.body.url)
        }
        expect(yield* wayBack()).toEqual([moved])
        // The sandbox was told this service's callback once; the person lands on the latest returnUrl.
        const done = yield* approve(sessionId, "Grace Hopper", "GH-1906")
        expect(yield* backFromProvider(done.headers.location!)).toBe(moved)
        // The page's own way back goes the same way.
        const page = yield* send("GET", `/kyc/sandbox/${sessionId}`)
        expect(String(page.body)).toContain(`href="${TEST_APP_URL}/kyc/return?user=${account.address}"`)
        expect(yield* sessionRows(account.address)).toHaveLength(1)
      })
    )

    it.effect("someone coming back with no check in progress goes to APP_URL/", () =>
      Effect.gen(function* () {
        const { account } = yield* signIn()
        expect(yield* backFromProvider(`${TEST_APP_URL}/kyc/return?user=${account.address}`)).toBe(`${TEST_APP_URL}/`)
        const bad = yield* send("GET", "/kyc/return?user=nobody")
        expect(bad.body).toEqual({ error: "user: must be a 0x-prefixed 20-byte hex address", code: "BAD_REQUEST" })
      })
    )

    it.effect("an empty body or {} starts a session; a non-string returnUrl is 400", () =>
      Effect.gen(function* () {
        const { token } = yield* signIn()
        expect((yield* startSession(token)).status).toBe(200)
        const other = yield* signIn()
        expect((yield* startSession(other.token, {})).status).toBe(200)
        for (const returnUrl of [42, null]) {
          const bad = yield* startSession(other.token, { returnUrl })
          expect(bad.status).toBe(400)
          expect(bad.body).toEqual({ error: "returnUrl: must be a URL string", code: "BAD_REQUEST" })
        }
        const anonymous = yield* send("POST", "/kyc/session", { json: {} })
        expect(anonymous.status).toBe(401)
        expect(anonymous.body.code).toBe("UNAUTHORIZED")
      })
    )

    it.effect("the page of a finished session says so; submitting again changes nothing", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const sessionId = yield* openSandboxSession(token, { returnUrl: RETURN })
        expect((yield* approve(sessionId, "Hedy Lamarr", "HL190011")).status).toBe(303)
        const page = yield* send("GET", `/kyc/sandbox/${sessionId}`)
        expect(page.status).toBe(200)
        expect(String(page.body)).toContain("already has a result")
        expect(String(page.body)).not.toContain("<form")
        const resubmit = yield* submitSandbox(sessionId, { outcome: "decline" })
        expect(resubmit.status).toBe(303)
        expect(resubmit.headers.location).toBe(`/kyc/sandbox/${sessionId}`)
        expect((yield* me(token)).kyc).toBe("approved")
        expect(yield* cardCount(account.address)).toBe(1)
      })
    )

    it.effect("the sandbox form refuses an approval without a name or a sane document number", () =>
      Effect.gen(function* () {
        const { token } = yield* signIn()
        const sessionId = yield* openSandboxSession(token)
        for (const fields of [
          { outcome: "approve" },
          { fullName: "Ok Name", documentNumber: "", outcome: "approve" },
          { fullName: "Ok Name", documentNumber: "<script>", outcome: "approve" },
          { fullName: "Ok Name", documentNumber: "12", outcome: "approve" }
        ]) {
          const response = yield* submitSandbox(sessionId, fields)
          expect(response.status).toBe(400)
          expect(JSON.parse(response.body).code).toBe("BAD_REQUEST")
        }
        const wrongOutcome = yield* submitSandbox(sessionId, { outcome: "approve-all" })
        expect(wrongOutcome.status).toBe(400)
        expect((yield* me(token)).kyc).toBe("pending")
      })
    )

    it.effect("unknown sandbox sessions are 404 NOT_FOUND", () =>
      Effect.gen(function* () {
        const response = yield* send("GET", "/kyc/sandbox/AAAAAAAAAAAAAAAAAAAAAA")
        expect(response.status).toBe(404)
        expect(response.body.code).toBe("NOT_FOUND")
        const post = yield* submitSandbox("AAAAAAAAAAAAAAAAAAAAAA", { outcome: "abandon" })
        expect(post.status).toBe(404)
      })
    )

    it.effect("GET /me needs a token", () =>
      Effect.gen(function* () {
        expect((yield* send("GET", "/me", { headers: bearer("x".repeat(43)) })).status).toBe(401)
      })
    )
  }
)

describe("returnUrl", () => {
  layer(testServer(kycEnv({ WEB_ORIGIN: `${TEST_APP_URL},http://localhost:5173` }), { chain: InMemoryChain.layer() }), {
    excludeTestServices: true
  })("is kept only on an exact WEB_ORIGIN origin", (it) => {
    const DEFAULT = `${TEST_APP_URL}/`
    const cases: ReadonlyArray<readonly [unknown, string]> = [
      [`${TEST_APP_URL}/kyc/done?x=1#top`, `${TEST_APP_URL}/kyc/done?x=1#top`],
      ["http://localhost:5173/back", "http://localhost:5173/back"],
      [TEST_APP_URL, DEFAULT],
      ["https://evil.example/", DEFAULT],
      ["https://app.example.com.evil.com/", DEFAULT],
      ["https://app.example.evil.com/", DEFAULT],
      ["https://app.example.com@evil.com/", DEFAULT],
      ["https://app.example@evil.com/", DEFAULT],
      ["https://user:pw@app.example.com/", DEFAULT],
      ["javascript:alert(document.cookie)", DEFAULT],
      ["//evil.com/path", DEFAULT],
      ["/relative/path", DEFAULT],
      ["https://app.example.com:8443/", DEFAULT],
      ["http://app.example.com/", DEFAULT],
      ["http://localhost:5174/", DEFAULT],
      ["not a url", DEFAULT],
      ["", DEFAULT]
    ]
    it.effect("tricks are replaced by the default APP_URL/", () =>
      Effect.gen(function* () {
        const results = yield* Effect.forEach(
          cases,
          ([given, expected]) =>
            Effect.gen(function* () {
              const { account, token } = yield* signIn()
              const sessionId = yield* openSandboxSession(token, { returnUrl: given })
              const [session] = yield* sessionRows(account.address)
              expect(session!.returnUrl, String(given)).toBe(expected)
              // And it is where the person coming back from the sandbox ends up.
              const done = yield* submitSandbox(sessionId, { outcome: "abandon" })
              expect(yield* backFromProvider(done.headers.location!), String(given)).toBe(expected)
            }),
          { concurrency: 4 }
        )
        expect(results).toHaveLength(cases.length)
      })
    )
  })
})
