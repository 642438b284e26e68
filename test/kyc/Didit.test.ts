/**
 * The Didit adapter against a local fake of Didit's HTTP API (a tiny Node server): session
 * creation, signed webhooks, the decision fetch, reconciliation while polling, and failures.
 */
import { randomUUID } from "node:crypto"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeEach, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { signDidit } from "../../src/kyc/Webhook.js"
import { send } from "../support/http.js"
import { TEST_APP_URL, testServer } from "../support/TestServer.js"
import {
  backFromProvider,
  CARD_KEY_HEX,
  cardCount,
  kycRow,
  me,
  query,
  sessionRows,
  signIn,
  startSession
} from "./helpers.js"

const API_KEY = "didit-api-key-for-tests"
const WEBHOOK_SECRET = "didit-webhook-secret-for-tests"
const WORKFLOW_ID = "11111111-2222-3333-4444-555555555555"

interface IdVerification {
  readonly status?: string
  readonly full_name?: string
  readonly first_name?: string
  readonly last_name?: string
  readonly document_number?: string
}

interface FakeSession {
  status: string
  idVerification: IdVerification | null
  readonly vendorData: string
  readonly callback: string
}

/** Didit as far as we use it: create a session, read its decision. */
const fake = {
  sessions: new Map<string, FakeSession>(),
  createBodies: [] as Array<Record<string, unknown>>,
  decisionCalls: [] as Array<string>,
  unauthorized: 0,
  failCreate: false,
  failDecision: false
}

const readBody = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let text = ""
    request.on("data", (chunk: Buffer) => {
      text += chunk.toString()
    })
    request.on("end", () => resolve(text))
  })

const didit = createServer(async (request, response) => {
  const json = (status: number, body: unknown) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))
  const body = await readBody(request)
  if (request.headers["x-api-key"] !== API_KEY) {
    fake.unauthorized++
    return json(401, { detail: "Invalid API key" })
  }
  if (request.method === "POST" && request.url === "/v3/session/") {
    if (fake.failCreate) return json(500, { detail: "boom" })
    const payload = JSON.parse(body) as Record<string, string>
    fake.createBodies.push(payload)
    const id = randomUUID()
    fake.sessions.set(id, {
      status: "Not Started",
      idVerification: null,
      vendorData: payload.vendor_data ?? "",
      callback: payload.callback ?? ""
    })
    return json(201, {
      session_id: id,
      session_number: 1234,
      session_token: "tok",
      url: `https://verify.didit.test/session/${id}`,
      status: "Not Started",
      workflow_id: payload.workflow_id,
      vendor_data: payload.vendor_data,
      callback: payload.callback
    })
  }
  const decision = /^\/v3\/session\/([0-9a-f-]{36})\/decision\/$/.exec(request.url ?? "")
  if (request.method === "GET" && decision !== null) {
    const id = decision[1]!
    fake.decisionCalls.push(id)
    if (fake.failDecision) return json(503, { detail: "unavailable" })
    const session = fake.sessions.get(id)
    if (session === undefined) return json(404, { detail: "Not found." })
    return json(200, {
      session_id: id,
      session_number: 1234,
      status: session.status,
      workflow_id: WORKFLOW_ID,
      vendor_data: session.vendorData,
      features: ["ID_VERIFICATION"],
      id_verifications:
        session.idVerification === null ? null : [{ node_id: "feature_ocr_1", ...session.idVerification }]
    })
  }
  return json(404, { detail: "Not found." })
})
await new Promise<void>((resolve) => didit.listen(0, "127.0.0.1", resolve))
const DIDIT_URL = `http://127.0.0.1:${(didit.address() as AddressInfo).port}`
afterAll(() => new Promise<void>((resolve) => didit.close(() => resolve())))

beforeEach(() => {
  fake.failCreate = false
  fake.failDecision = false
})

const env = {
  KYC_PROVIDER: "didit",
  DIDIT_API_KEY: API_KEY,
  DIDIT_WEBHOOK_SECRET: WEBHOOK_SECRET,
  DIDIT_WORKFLOW_ID: WORKFLOW_ID,
  DIDIT_BASE_URL: DIDIT_URL,
  CARD_DATA_KEY: CARD_KEY_HEX
}

/** A Didit `status.updated` webhook body, as Didit shapes it. */
const diditEvent = (
  sessionId: string,
  status: string,
  extra: { readonly decision?: unknown; readonly webhookType?: string; readonly timestamp?: number } = {}
) =>
  JSON.stringify({
    session_id: sessionId,
    status,
    webhook_type: extra.webhookType ?? "status.updated",
    created_at: Math.floor(Date.now() / 1000),
    timestamp: extra.timestamp ?? Math.floor(Date.now() / 1000),
    workflow_id: WORKFLOW_ID,
    ...(extra.decision === undefined ? {} : { decision: extra.decision })
  })

const deliverDidit = (body: string, options: { readonly signedAt?: number; readonly secret?: string } = {}) =>
  send("POST", "/kyc/webhook/didit", {
    text: body,
    headers: { ...signDidit(options.secret ?? WEBHOOK_SECRET, body, options.signedAt ?? Date.now()) }
  })

const diditSessionId = (url: string) => {
  const match = /^https:\/\/verify\.didit\.test\/session\/([0-9a-f-]{36})$/.exec(url)
  expect(match).not.toBeNull()
  return match![1]!
}

/** A signed-in user with a Didit session in progress. */
const pendingUser = Effect.gen(function* () {
  const user = yield* signIn()
  const started = yield* startSession(user.token, { returnUrl: `${TEST_APP_URL}/done` })
  expect(started.status).toBe(200)
  return { ...user, sessionId: diditSessionId(started.body.url) }
})

layer(testServer(env, { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "Didit as the identity provider",
  (it) => {
    it.effect("POST /kyc/session creates a Didit session for the workflow, the user and the return URL", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const before = fake.createBodies.length
        const started = yield* startSession(token, { returnUrl: `${TEST_APP_URL}/done` })
        expect(started.status).toBe(200)
        const sessionId = diditSessionId(started.body.url)
        // Didit is told this service's callback, which sends the person on to the return URL.
        const callback = `${TEST_APP_URL}/kyc/return?user=${account.address}`
        expect(fake.createBodies.slice(before)).toEqual([
          { workflow_id: WORKFLOW_ID, vendor_data: account.address, callback }
        ])
        expect(yield* me(token)).toMatchObject({ kyc: "pending", card: null })
        // Idempotent while pending: no second Didit session.
        expect((yield* startSession(token)).body.url).toBe(started.body.url)
        expect(fake.createBodies.length).toBe(before + 1)
        expect(yield* sessionRows(account.address)).toEqual([
          { sessionId, status: "pending", returnUrl: `${TEST_APP_URL}/done` }
        ])
        // A new returnUrl while pending takes effect although Didit keeps the callback it was given:
        // Didit appends its own parameters to the callback.
        expect((yield* startSession(token, { returnUrl: `${TEST_APP_URL}/again` })).body.url).toBe(started.body.url)
        expect(fake.createBodies.length).toBe(before + 1)
        const didit = `&verificationSessionId=${sessionId}&status=In%20Progress`
        expect(yield* backFromProvider(callback, didit)).toBe(`${TEST_APP_URL}/again`)
        expect(fake.unauthorized).toBe(0)
      })
    )

    it.effect("an Approved webhook with its decision issues the card with the document's name", () =>
      Effect.gen(function* () {
        const { account, token, sessionId } = yield* pendingUser
        const progress = yield* deliverDidit(diditEvent(sessionId, "In Progress"))
        expect(progress.body).toEqual({ received: true, outcome: "unchanged" })
        const decision = {
          id_verifications: [
            { status: "Approved", first_name: "Mary", last_name: "Jackson", document_number: "MJ-77001" }
          ]
        }
        const approved = yield* deliverDidit(diditEvent(sessionId, "Approved", { decision }))
        expect(approved.status).toBe(200)
        expect(approved.body).toEqual({ received: true, outcome: "applied" })
        expect(yield* me(token)).toMatchObject({ kyc: "approved", card: { holder: "Mary Jackson" } })
        expect(yield* cardCount(account.address)).toBe(1)
      })
    )

    it.effect("an Approved webhook without a decision makes us fetch it from Didit", () =>
      Effect.gen(function* () {
        const { token, sessionId } = yield* pendingUser
        const session = fake.sessions.get(sessionId)!
        session.status = "Approved"
        session.idVerification = { status: "Approved", full_name: "Dorothy Vaughan", document_number: "DV1910" }
        const calls = fake.decisionCalls.filter((id) => id === sessionId).length
        const response = yield* deliverDidit(diditEvent(sessionId, "Approved"))
        expect(response.body).toEqual({ received: true, outcome: "applied" })
        expect(fake.decisionCalls.filter((id) => id === sessionId).length).toBe(calls + 1)
        expect(yield* me(token)).toMatchObject({ kyc: "approved", card: { holder: "Dorothy Vaughan" } })
      })
    )

    it.effect("while the app polls, Didit is asked at most once per few seconds, and the result lands", () =>
      Effect.gen(function* () {
        const { account, token, sessionId } = yield* pendingUser
        fake.sessions.get(sessionId)!.status = "In Progress"
        const calls = () => fake.decisionCalls.filter((id) => id === sessionId).length
        const polls = yield* Effect.all(
          Array.from({ length: 6 }, () => me(token)),
          { concurrency: "unbounded" }
        )
        expect(polls.every((body) => body.kyc === "pending")).toBe(true)
        expect(calls()).toBe(1)
        // Didit now has the result, but the window is not over: no call, no change.
        const session = fake.sessions.get(sessionId)!
        session.status = "Approved"
        session.idVerification = { first_name: "Christine", last_name: "Darden", document_number: "CD-1942" }
        expect((yield* me(token)).kyc).toBe("pending")
        expect(calls()).toBe(1)
        // The window is kept in the database; move it back as if 10 seconds had passed.
        yield* query(
          "UPDATE kyc_accounts SET checked_at = checked_at - interval '10 seconds' WHERE address = $1",
          account.address
        )
        expect(yield* me(token)).toMatchObject({ kyc: "approved", card: { holder: "Christine Darden" } })
        expect(calls()).toBe(2)
        // Nothing pending: polls no longer ask.
        yield* me(token)
        expect(calls()).toBe(2)
      })
    )

    it.effect("Declined means declined; Abandoned and Expired mean none", () =>
      Effect.gen(function* () {
        const declined = yield* pendingUser
        expect((yield* deliverDidit(diditEvent(declined.sessionId, "Declined"))).body.outcome).toBe("applied")
        expect(yield* me(declined.token)).toMatchObject({ kyc: "declined", card: null })
        for (const status of ["Abandoned", "Expired", "Kyc Expired"]) {
          const user = yield* pendingUser
          expect((yield* deliverDidit(diditEvent(user.sessionId, status))).body.outcome).toBe("applied")
          expect((yield* me(user.token)).kyc).toBe("none")
        }
      })
    )

    it.effect("bad signatures and stale timestamps are 401 and change nothing", () =>
      Effect.gen(function* () {
        const { account, sessionId } = yield* pendingUser
        const before = yield* kycRow(account.address)
        const body = diditEvent(sessionId, "Declined")
        const wrongSecret = yield* deliverDidit(body, { secret: "wrong" })
        expect(wrongSecret.status).toBe(401)
        expect(wrongSecret.body.code).toBe("WEBHOOK_SIGNATURE_INVALID")
        const edited = yield* send("POST", "/kyc/webhook/didit", {
          text: body.replace("Declined", "Approved"),
          headers: { ...signDidit(WEBHOOK_SECRET, body, Date.now()) }
        })
        expect(edited.status).toBe(401)
        expect(edited.body.code).toBe("WEBHOOK_SIGNATURE_INVALID")
        const stale = yield* deliverDidit(body, { signedAt: Date.now() - 10 * 60 * 1000 })
        expect(stale.status).toBe(401)
        expect(stale.body.code).toBe("WEBHOOK_TIMESTAMP_STALE")
        // A fresh header on an old (signed) body is stale too.
        const replay = diditEvent(sessionId, "Declined", { timestamp: Math.floor(Date.now() / 1000) - 3600 })
        const replayed = yield* deliverDidit(replay)
        expect(replayed.status).toBe(401)
        expect(replayed.body.code).toBe("WEBHOOK_TIMESTAMP_STALE")
        expect(yield* kycRow(account.address)).toEqual(before)
        expect(before!.status).toBe("pending")
      })
    )

    it.effect("a repeated delivery is processed once; other event types are acknowledged and ignored", () =>
      Effect.gen(function* () {
        const { token, sessionId } = yield* pendingUser
        const body = diditEvent(sessionId, "Declined")
        expect((yield* deliverDidit(body)).body.outcome).toBe("applied")
        expect((yield* deliverDidit(body)).body.outcome).toBe("duplicate")
        const other = yield* deliverDidit(diditEvent(sessionId, "Approved", { webhookType: "data.updated" }))
        expect(other.body).toEqual({ received: true, outcome: "ignored" })
        expect((yield* me(token)).kyc).toBe("declined")
      })
    )

    it.effect("Didit failing to create a session is 502 KYC_PROVIDER_ERROR and nothing changes", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        fake.failCreate = true
        const response = yield* startSession(token)
        expect(response.status).toBe(502)
        expect(response.body).toEqual({ error: expect.any(String), code: "KYC_PROVIDER_ERROR" })
        expect(JSON.stringify(response.body)).not.toContain("boom")
        expect(yield* me(token)).toMatchObject({ kyc: "none", card: null })
        expect(yield* sessionRows(account.address)).toEqual([])
        fake.failCreate = false
        expect((yield* startSession(token)).status).toBe(200)
      })
    )

    it.effect("a failed decision fetch answers 502 so Didit retries, and the retry applies", () =>
      Effect.gen(function* () {
        const { token, sessionId } = yield* pendingUser
        const session = fake.sessions.get(sessionId)!
        session.status = "Approved"
        session.idVerification = { full_name: "Annie Easley", document_number: "AE-1933" }
        fake.failDecision = true
        const body = diditEvent(sessionId, "Approved")
        const failed = yield* deliverDidit(body)
        expect(failed.status).toBe(502)
        expect(failed.body.code).toBe("KYC_PROVIDER_ERROR")
        expect((yield* me(token)).kyc).toBe("pending")
        fake.failDecision = false
        const retried = yield* deliverDidit(body)
        expect(retried.body).toEqual({ received: true, outcome: "applied" })
        expect(yield* me(token)).toMatchObject({ kyc: "approved", card: { holder: "Annie Easley" } })
      })
    )

    it.effect("the sandbox is not served while Didit is the provider", () =>
      Effect.gen(function* () {
        expect((yield* send("GET", "/kyc/sandbox/AAAAAAAAAAAAAAAAAAAAAA")).status).toBe(404)
        const webhook = yield* send("POST", "/kyc/webhook/sandbox", { text: "{}" })
        expect(webhook.status).toBe(404)
        expect(webhook.body.code).toBe("NOT_FOUND")
      })
    )
  }
)
