/**
 * The webhook endpoint over HTTP (sandbox scheme): authentication over the raw body, freshness,
 * one processing per delivery, forward-only moves, and exactly one card under concurrency.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { signSandbox } from "../../src/kyc/Webhook.js"
import { deriveKey, parseKey, seal } from "../../src/runtime/Secrets.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import {
  CARD_KEY_HEX,
  cardCount,
  deliverSandbox,
  kycEnv,
  kycRow,
  me,
  openSandboxSession,
  query,
  SANDBOX_SECRET,
  sandboxEvent,
  sessionRows,
  signIn
} from "./helpers.js"

const deliveryCount = (sessionId: string) =>
  query<{ n: number }>("SELECT count(*)::int AS n FROM kyc_webhook_deliveries WHERE session_id = $1", sessionId).pipe(
    Effect.map((rows) => rows[0]!.n)
  )

/** Everything a webhook could change for this user, to compare before and after. */
const snapshot = (address: string, sessionId: string) =>
  Effect.all({
    account: kycRow(address),
    sessions: sessionRows(address),
    deliveries: deliveryCount(sessionId),
    cards: cardCount(address)
  })

/**
 * A signed-in user with a pending sandbox session. The polls in these tests would otherwise ask
 * the sandbox (which knows nothing here, as the page is never used) and change nothing either.
 */
const pendingUser = Effect.gen(function* () {
  const user = yield* signIn()
  const sessionId = yield* openSandboxSession(user.token)
  return { ...user, sessionId }
})

const approval = (sessionId: string, extra: { occurredAt?: number; id?: string } = {}) =>
  sandboxEvent({
    sessionId,
    status: "approved",
    document: { fullName: "Katherine Johnson", documentNumber: `KJ${sessionId.slice(0, 8)}` },
    ...extra
  })

layer(testServer(kycEnv(), { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "sandbox webhooks",
  (it) => {
    it.effect("a bad signature is 401 WEBHOOK_SIGNATURE_INVALID and changes nothing", () =>
      Effect.gen(function* () {
        const { account, sessionId } = yield* pendingUser
        const before = yield* snapshot(account.address, sessionId)
        const body = approval(sessionId)
        const signed = signSandbox(SANDBOX_SECRET, body, Date.now())
        const attempts = [
          // signed with another secret
          { body, headers: signSandbox("not-the-secret", body, Date.now()) },
          // the body edited after signing (one byte)
          { body: body.replace("Katherine", "Katherinf"), headers: signed },
          // the timestamp header moved after signing
          { body, headers: { ...signed, "x-sandbox-timestamp": String(Number(signed["x-sandbox-timestamp"]) + 1) } },
          // no signature at all, or a malformed one
          { body, headers: {} },
          { body, headers: { "x-sandbox-timestamp": signed["x-sandbox-timestamp"], "x-sandbox-signature": "v1=zz" } }
        ]
        for (const attempt of attempts) {
          const response = yield* deliverSandbox(attempt.body, { headers: attempt.headers })
          expect(response.status).toBe(401)
          expect(response.body).toEqual({ error: expect.any(String), code: "WEBHOOK_SIGNATURE_INVALID" })
        }
        expect(yield* snapshot(account.address, sessionId)).toEqual(before)
        expect(before.account!.status).toBe("pending")
      })
    )

    it.effect("a stale or future timestamp is 401 WEBHOOK_TIMESTAMP_STALE and changes nothing", () =>
      Effect.gen(function* () {
        const { account, sessionId } = yield* pendingUser
        const before = yield* snapshot(account.address, sessionId)
        for (const offset of [-6 * 60 * 1000, -60 * 60 * 1000, 6 * 60 * 1000]) {
          const response = yield* deliverSandbox(approval(sessionId), { signedAt: Date.now() + offset })
          expect(response.status).toBe(401)
          expect(response.body).toEqual({ error: expect.any(String), code: "WEBHOOK_TIMESTAMP_STALE" })
        }
        expect(yield* snapshot(account.address, sessionId)).toEqual(before)
        // Just inside the window it is accepted.
        const fresh = yield* deliverSandbox(approval(sessionId), { signedAt: Date.now() - 4 * 60 * 1000 })
        expect(fresh.status).toBe(200)
        expect(fresh.body).toEqual({ received: true, outcome: "applied" })
      })
    )

    it.effect("the same delivery twice makes one transition", () =>
      Effect.gen(function* () {
        const { account, token, sessionId } = yield* pendingUser
        const body = approval(sessionId)
        const first = yield* deliverSandbox(body)
        expect(first.body).toEqual({ received: true, outcome: "applied" })
        const card = (yield* me(token)).card
        expect(card.holder).toBe("Katherine Johnson")
        // A retry, re-signed later as a provider would, is recognised by its delivery id.
        const second = yield* deliverSandbox(body, { signedAt: Date.now() + 1000 })
        expect(second.status).toBe(200)
        expect(second.body).toEqual({ received: true, outcome: "duplicate" })
        expect(yield* deliveryCount(sessionId)).toBe(1)
        expect(yield* cardCount(account.address)).toBe(1)
        expect((yield* me(token)).card).toEqual(card)
      })
    )

    it.effect("events out of order: the final state wins and is never overwritten", () =>
      Effect.gen(function* () {
        const { account, token, sessionId } = yield* pendingUser
        const t0 = Date.now()
        // The approval (later event) arrives first, then an older "pending".
        expect((yield* deliverSandbox(approval(sessionId, { occurredAt: t0 }))).body.outcome).toBe("applied")
        const late = yield* deliverSandbox(sandboxEvent({ sessionId, status: "pending", occurredAt: t0 - 5000 }))
        expect(late.body).toEqual({ received: true, outcome: "unchanged" })
        // Another terminal verdict for the same session does not replace the first either.
        const decline = yield* deliverSandbox(sandboxEvent({ sessionId, status: "declined", occurredAt: t0 + 5000 }))
        expect(decline.body.outcome).toBe("unchanged")
        const abandon = yield* deliverSandbox(sandboxEvent({ sessionId, status: "abandoned", occurredAt: t0 + 6000 }))
        expect(abandon.body.outcome).toBe("unchanged")
        expect(yield* me(token)).toMatchObject({ kyc: "approved", card: { holder: "Katherine Johnson" } })
        expect((yield* sessionRows(account.address))[0]!.status).toBe("approved")
        expect(yield* deliveryCount(sessionId)).toBe(4)
      })
    )

    it.effect("pending events before the result change nothing; the result then applies", () =>
      Effect.gen(function* () {
        const { token, sessionId } = yield* pendingUser
        const pending = yield* deliverSandbox(sandboxEvent({ sessionId, status: "pending" }))
        expect(pending.body.outcome).toBe("unchanged")
        expect((yield* me(token)).kyc).toBe("pending")
        const declined = yield* deliverSandbox(sandboxEvent({ sessionId, status: "declined" }))
        expect(declined.body.outcome).toBe("applied")
        expect((yield* me(token)).kyc).toBe("declined")
      })
    )

    it.effect("a late event about an older session does not touch the current one", () =>
      Effect.gen(function* () {
        const { account, token, sessionId: old } = yield* pendingUser
        expect((yield* deliverSandbox(sandboxEvent({ sessionId: old, status: "abandoned" }))).body.outcome).toBe(
          "applied"
        )
        expect((yield* me(token)).kyc).toBe("none")
        const current = yield* openSandboxSession(token)
        // A stray approval for the abandoned session: that session is final, nothing moves.
        expect((yield* deliverSandbox(approval(old))).body.outcome).toBe("unchanged")
        expect(yield* me(token)).toMatchObject({ kyc: "pending", card: null })
        expect((yield* sessionRows(account.address)).map((row) => [row.sessionId, row.status])).toEqual([
          [old, "expired"],
          [current, "pending"]
        ])
      })
    )

    it.effect("signed but malformed events are 400; unknown sessions are acknowledged and ignored", () =>
      Effect.gen(function* () {
        for (const [body, error] of [
          ["not json", "the request body is not valid JSON"],
          // The field, in words: not the schema engine's.
          ["[1]", "the sandbox event is malformed: body: must be an object"],
          ["{}", "the sandbox event is malformed: id: is required"],
          [
            JSON.stringify({ id: "x", type: "session.updated", status: "approved" }),
            "the sandbox event is malformed: sessionId: is required"
          ]
        ] as const) {
          const response = yield* deliverSandbox(body)
          expect(response.status).toBe(400)
          expect(response.body).toEqual({ error, code: "BAD_REQUEST" })
        }
        const unknown = yield* deliverSandbox(sandboxEvent({ sessionId: "no-such-session", status: "declined" }))
        expect(unknown.status).toBe(200)
        expect(unknown.body).toEqual({ received: true, outcome: "ignored" })
      })
    )

    it.effect("only the active provider's webhook exists", () =>
      Effect.gen(function* () {
        const body = sandboxEvent({ sessionId: "x", status: "declined" })
        const response = yield* send("POST", "/kyc/webhook/didit", {
          text: body,
          headers: { "x-signature": "0".repeat(64), "x-timestamp": String(Math.floor(Date.now() / 1000)) }
        })
        expect(response.status).toBe(404)
        expect(response.body.code).toBe("NOT_FOUND")
      })
    )

    it.effect("an oversized webhook body is 413", () =>
      Effect.gen(function* () {
        const body = JSON.stringify({ pad: "x".repeat(70 * 1024) })
        const response = yield* deliverSandbox(body)
        expect(response.status).toBe(413)
        expect(response.body.code).toBe("PAYLOAD_TOO_LARGE")
      })
    )

    it.effect("concurrent approval deliveries and polls issue exactly one card", () =>
      Effect.gen(function* () {
        const { account, token, sessionId } = yield* pendingUser
        // The sandbox also reports the approval, so polls reconcile to it while webhooks arrive.
        const documentKey = deriveKey(Option.getOrThrow(parseKey(CARD_KEY_HEX)), "sandboxDocument")
        yield* query(
          `UPDATE kyc_sandbox_sessions SET outcome = 'approve', full_name = 'Katherine Johnson',
           document_number_sealed = $2, completed_at = now() WHERE id = $1`,
          sessionId,
          seal(documentKey, `KJ${sessionId.slice(0, 8)}`, `kyc-sandbox:${sessionId}:document`)
        )
        const deliveries = Array.from({ length: 8 }, () => deliverSandbox(approval(sessionId)))
        const polls = Array.from({ length: 8 }, () => send("GET", "/me", { headers: bearer(token) }))
        const results = yield* Effect.all([...deliveries, ...polls], { concurrency: "unbounded" })
        expect(results.every((r) => r.status === 200)).toBe(true)
        // Whoever came first (a delivery or the one poll allowed to ask the sandbox) applied it.
        const outcomes = results.slice(0, 8).map((r) => r.body.outcome)
        expect(outcomes.filter((o) => o === "applied").length).toBeLessThanOrEqual(1)
        expect(outcomes.filter((o) => o === "applied" || o === "unchanged")).toHaveLength(8)
        expect(yield* cardCount(account.address)).toBe(1)
        expect(yield* me(token)).toMatchObject({ kyc: "approved", card: { holder: "Katherine Johnson" } })
      })
    )
  }
)
