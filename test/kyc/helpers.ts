/** Shared steps for the identity-check tests: sign-in, sessions, the sandbox form, webhooks, rows. */
import { HttpClient, HttpClientRequest, HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { signSandbox } from "../../src/kyc/Webhook.js"

export { newAccount, signIn } from "../support/auth.js"

import { bearer, type RawResponse, send } from "../support/http.js"

export const SANDBOX_SECRET = "sandbox-secret-for-tests-0123456789abcdef"
export const CARD_KEY_HEX = "3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f10"

/** Environment for a test server with fixed keys (nothing is written under DATA_DIR). */
export const kycEnv = (extra: Record<string, string> = {}) => ({
  KYC_SANDBOX_SECRET: SANDBOX_SECRET,
  CARD_DATA_KEY: CARD_KEY_HEX,
  ...extra
})

export const startSession = (token: string, body?: unknown) =>
  send("POST", "/kyc/session", { headers: bearer(token), ...(body === undefined ? {} : { json: body }) })

export const me = (token: string) =>
  send("GET", "/me", { headers: bearer(token) }).pipe(
    Effect.tap((response) => expect(response.status).toBe(200)),
    Effect.map((response) => response.body)
  )

/** The sandbox session id at the end of a sandbox page URL. */
export const sandboxSessionId = (url: string) => {
  const match = /\/kyc\/sandbox\/([A-Za-z0-9_-]{22})$/.exec(new URL(url).pathname)
  expect(match).not.toBeNull()
  return match![1]!
}

/** Starts a session and answers its sandbox session id. */
export const openSandboxSession = (token: string, body?: unknown) =>
  Effect.gen(function* () {
    const response = yield* startSession(token, body)
    expect(response.status).toBe(200)
    return sandboxSessionId(response.body.url)
  })

/** Submits the sandbox page's form as a browser would (urlencoded, redirects not followed). */
export const submitSandbox = (sessionId: string, fields: Record<string, string>) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.execute(
      HttpClientRequest.post(`/kyc/sandbox/${sessionId}`).pipe(HttpClientRequest.bodyUrlParams(fields))
    )
    const text = yield* response.text
    return { status: response.status, headers: response.headers, body: text } as RawResponse
  }).pipe(Effect.scoped, Effect.orDie)

/**
 * Where a person the identity provider sends to `callback` (this service's `/kyc/return`, under
 * API_URL) ends up: the 303's Location. `extra` is what a provider appends to the query.
 */
export const backFromProvider = (callback: string, extra = "") =>
  Effect.gen(function* () {
    const url = new URL(callback)
    expect(url.pathname).toBe("/kyc/return")
    const response = yield* send("GET", `${url.pathname}${url.search}${extra}`)
    expect(response.status).toBe(303)
    expect(response.headers["cache-control"]).toBe("no-store")
    return response.headers.location
  })

export const approve = (sessionId: string, fullName: string, documentNumber: string) =>
  submitSandbox(sessionId, { fullName, documentNumber, outcome: "approve" })

/** A sandbox webhook body as the sandbox itself would send it. */
export const sandboxEvent = (event: {
  readonly sessionId: string
  readonly status: string
  readonly occurredAt?: number
  readonly id?: string
  readonly document?: { readonly fullName: string; readonly documentNumber: string }
}) =>
  JSON.stringify({
    id: event.id ?? crypto.randomUUID(),
    type: "session.updated",
    sessionId: event.sessionId,
    status: event.status,
    occurredAt: event.occurredAt ?? Date.now(),
    ...(event.document === undefined ? {} : { document: event.document })
  })

/** POSTs a raw body to the sandbox webhook, signed with `secret` at `signedAt`. */
export const deliverSandbox = (
  body: string,
  options: { readonly secret?: string; readonly signedAt?: number; readonly headers?: Record<string, string> } = {}
) =>
  send("POST", "/kyc/webhook/sandbox", {
    text: body,
    headers: options.headers ?? {
      ...signSandbox(options.secret ?? SANDBOX_SECRET, body, options.signedAt ?? Date.now())
    }
  })

/** The test server's own base URL (for a browser or a raw fetch). */
export const serverBaseUrl = Effect.gen(function* () {
  const server = yield* HttpServer.HttpServer
  if (server.address._tag !== "TcpAddress") throw new Error("expected a TCP server")
  return `http://127.0.0.1:${server.address.port}`
})

export const query = <A extends object>(text: string, ...params: ReadonlyArray<unknown>) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql.unsafe<A>(text, params)).pipe(Effect.orDie)

export const cardCount = (address: string) =>
  query<{ n: number }>("SELECT count(*)::int AS n FROM cards WHERE address = $1", address).pipe(
    Effect.map((rows) => rows[0]!.n)
  )

export const kycRow = (address: string) =>
  query<{ status: string; sessionId: string | null }>(
    "SELECT status, session_id FROM kyc_accounts WHERE address = $1",
    address
  ).pipe(Effect.map((rows) => rows[0]))

export const sessionRows = (address: string) =>
  query<{ sessionId: string; status: string; returnUrl: string }>(
    "SELECT session_id, status, return_url FROM kyc_sessions WHERE address = $1 ORDER BY created_at",
    address
  )
