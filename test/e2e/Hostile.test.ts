/**
 * Hostile input and failing dependencies, one reproduction per case of the hardening issue: every
 * answer is a coded `{error, code}` (or the x402 body) with the right status, never a 500, never a
 * hang, never a lie about money. The whole app runs on the production Node server over a database
 * behind a TCP proxy (to stall or cut it) and an in-memory chain that can stall.
 */
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { encodeHeader, Reason } from "../../src/merchant/X402.js"
import { ChainFaults, FaultyChain } from "../support/FaultyChain.js"
import { send } from "../support/http.js"
import { rawRequest } from "../support/rawHttp.js"
import { DatabaseProxy, ProxiedTestDatabase } from "../support/TestDatabase.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())

const server = testServer(
  {
    MERCHANT_PAY_TO: merchant.address,
    HTTP_HEADERS_TIMEOUT: "1 second",
    HTTP_REQUEST_TIMEOUT: "2 seconds",
    CHAIN_TIMEOUT: "500 millis",
    SETTLEMENT_WAIT: "1 second",
    DATABASE_CONNECT_TIMEOUT: "1 second",
    DATABASE_STATEMENT_TIMEOUT: "1 second",
    RECONCILE_INTERVAL: "200 millis",
    SETTLEMENT_RECONCILE_AFTER: "1 second"
  },
  { chain: FaultyChain },
  ProxiedTestDatabase
)

const port = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress" ? server.address.port : 0
)

const isErrorBody = (body: unknown, code: string) =>
  typeof body === "object" && body !== null && typeof (body as { error?: unknown }).error === "string"
    ? (body as { code?: unknown }).code === code
    : false

const createOrder = (amount = "2", description = "Tea") =>
  send("POST", "/merchant/orders", { json: { amount, description } }).pipe(
    Effect.tap((response) => expect(response.status).toBe(200)),
    Effect.map((response) => response.body as { id: string })
  )

const offerOf = (id: string) => send("GET", `/merchant/orders/${id}/pay`).pipe(Effect.map((r) => r.body as Offer))

/** A payer holding 100 USD1 on the in-memory chain. */
const fundedPayer = Effect.gen(function* () {
  const payer = privateKeyToAccount(generatePrivateKey())
  const chain = yield* InMemoryChain
  yield* chain.mint(chain.usd1.address, payer.address, parseUnits("100", 18))
  return payer
})

const pay = (id: string, header: string) =>
  send("POST", `/merchant/orders/${id}/pay`, { headers: { "payment-signature": header } })

const settlementsOf = (id: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => sql`SELECT status FROM settlements WHERE order_id = ${id}`)

const orderStatus = (id: string) =>
  send("GET", `/merchant/orders/${id}`).pipe(Effect.map((response) => response.body.status as string))

const eventuallyPaid = (id: string) =>
  eventually(`order ${id} to be paid`, orderStatus(id), (status) => status === "paid")

layer(server, { excludeTestServices: true })("hostile input and failing dependencies", (it) => {
  it.effect("1. a signed validBefore beyond 2^63-1, or beyond 2^256-1, is 402 before any write", () =>
    Effect.gen(function* () {
      const payer = yield* fundedPayer
      const order = yield* createOrder()
      const offer = yield* offerOf(order.id)
      const far = yield* Effect.promise(() => signPayment(payer, offer, { validBefore: (2n ** 64n).toString() }))
      const tooLate = yield* pay(order.id, far.header)
      expect(tooLate.status).toBe(402)
      expect(tooLate.body).toMatchObject({ code: "PAYMENT_INVALID", error: Reason.validBeforeTooLate })
      expect(yield* settlementsOf(order.id)).toEqual([])

      // No key signs beyond a uint256; such a payload is refused before its signature is looked at.
      const other = yield* createOrder()
      const otherOffer = yield* offerOf(other.id)
      const valid = yield* Effect.promise(() => signPayment(payer, otherOffer))
      const { authorization } = valid.payload.payload
      const beyond = encodeHeader({
        ...valid.payload,
        payload: { ...valid.payload.payload, authorization: { ...authorization, validBefore: (2n ** 256n).toString() } }
      })
      const refused = yield* pay(other.id, beyond)
      expect(refused.status).toBe(402)
      expect(refused.body).toMatchObject({ code: "PAYMENT_INVALID", error: "invalid_payload" })
      expect(yield* settlementsOf(other.id)).toEqual([])
    })
  )

  it.effect(
    "2. U+0000 or an unpaired surrogate in a description or a payment payload is refused, naming the field",
    () =>
      Effect.gen(function* () {
        for (const description of ["Tea\u0000", "Tea \ud800"]) {
          const response = yield* send("POST", "/merchant/orders", { json: { amount: "1", description } })
          expect(response.status).toBe(400)
          expect(response.body.code).toBe("BAD_REQUEST")
          expect(response.body.error).toMatch(/^description: contains/)
        }
        const payer = yield* fundedPayer
        const order = yield* createOrder()
        const offer = yield* offerOf(order.id)
        const requirements = offer.accepts[0]!
        const signed = yield* Effect.promise(() => signPayment(payer, offer))
        const variants: ReadonlyArray<[string, object]> = [
          ["extensions.note", { ...signed.payload, extensions: { note: "a\u0000b" } }],
          ["resource.description", { ...signed.payload, resource: { url: "https://x", description: "\u0000" } }],
          [
            "accepted.extra.memo",
            { ...signed.payload, accepted: { ...requirements, extra: { ...requirements.extra, memo: "\u0000" } } }
          ],
          ["extensions.\\ud800 (a key)", { ...signed.payload, extensions: { "\ud800": 1 } }]
        ]
        for (const [field, payload] of variants) {
          const header = Buffer.from(JSON.stringify(payload), "utf8").toString("base64")
          const response = yield* pay(order.id, header)
          expect(response.status, field).toBe(402)
          expect(response.body.code, field).toBe("PAYMENT_INVALID")
          expect(response.body.error, field).toContain(`invalid_payload: ${field}`)
        }
        expect(yield* settlementsOf(order.id)).toEqual([])
      })
  )

  it.effect("3. JSON nested 5,000 or 8,000 deep is 400", () =>
    Effect.gen(function* () {
      for (const depth of [5_000, 8_000]) {
        const response = yield* send("POST", "/auth/challenge", { text: `${"[".repeat(depth)}${"]".repeat(depth)}` })
        expect(response.status).toBe(400)
        expect(response.body).toEqual({
          error: "the request body nests arrays or objects deeper than 64 levels",
          code: "BAD_REQUEST"
        })
      }
    })
  )

  it.effect(
    "4. a body of a type its endpoint does not read, or of no declared type, is 415 naming the type it reads",
    () =>
      Effect.gen(function* () {
        const at = yield* port
        const post = (path: string, contentType: string | undefined, body: string) =>
          rawRequest(at, [
            `POST ${path} HTTP/1.1\r\nHost: test\r\n${contentType === undefined ? "" : `Content-Type: ${contentType}\r\n`}` +
              `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`
          ])
        const json = '{"amount":"1","description":"Tea"}'
        for (const contentType of [
          "multipart/form-data; boundary=x",
          "text/plain",
          "application/x-www-form-urlencoded",
          "application/problem+json"
        ]) {
          const response = yield* post("/merchant/orders", contentType, json)
          expect(response.status, contentType).toBe(415)
          expect(JSON.parse(response.body)).toEqual({
            error: `content-type ${contentType} is not accepted here: send content-type: application/json`,
            code: "UNSUPPORTED_MEDIA_TYPE"
          })
        }
        const untyped = yield* post("/merchant/orders", undefined, json)
        expect(untyped.status).toBe(415)
        expect(JSON.parse(untyped.body)).toEqual({
          error: "the request body has no content-type: send content-type: application/json",
          code: "UNSUPPORTED_MEDIA_TYPE"
        })
        // The sandbox page's form is the one endpoint that reads a URL-encoded form, and only that.
        const jsonToForm = yield* post(
          "/kyc/sandbox/AAAAAAAAAAAAAAAAAAAAAA",
          "application/json",
          '{"outcome":"approve"}'
        )
        expect(jsonToForm.status).toBe(415)
        expect(JSON.parse(jsonToForm.body)).toEqual({
          error:
            "content-type application/json is not accepted here: send content-type: application/x-www-form-urlencoded",
          code: "UNSUPPORTED_MEDIA_TYPE"
        })
        // A path no endpoint serves is a 404 whatever its body; an endpoint without a payload ignores one.
        expect((yield* post("/nowhere", "text/plain", "hello")).status).toBe(404)
        const order = yield* createOrder()
        const ignored = yield* post(`/merchant/orders/${order.id}/pay`, "text/plain", "hello")
        expect(ignored.status).toBe(402)
      })
  )

  it.effect("5. a chunked body over 64 KiB is a 413 with a body, on a connection that stays usable", () =>
    Effect.gen(function* () {
      const chunk = `${(8192).toString(16)}\r\n${"x".repeat(8192)}\r\n`
      const response = yield* rawRequest(yield* port, [
        "POST /merchant/orders HTTP/1.1\r\nHost: test\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        ...Array.from({ length: 10 }, () => chunk),
        "0\r\n\r\n"
      ])
      expect(response.status).toBe(413)
      expect(JSON.parse(response.body)).toMatchObject({ code: "PAYLOAD_TOO_LARGE" })
    })
  )

  it.effect("6. a database that accepts connections but never answers is a 503 naming it, then recovers", () =>
    Effect.gen(function* () {
      const order = yield* createOrder()
      const proxy = yield* DatabaseProxy
      proxy.setMode("stall")
      const read = yield* send("GET", `/merchant/orders/${order.id}`)
      const ready = yield* send("GET", "/ready")
      const created = yield* send("POST", "/merchant/orders", { json: { amount: "1", description: "x" } })
      proxy.setMode("refuse")
      const refused = yield* send("GET", `/merchant/orders/${order.id}`)
      proxy.setMode("forward")
      for (const response of [read, created, refused]) {
        expect(response.status).toBe(503)
        expect(response.body.code).toBe("DATABASE_UNAVAILABLE")
        expect(response.headers["retry-after"]).toBe("2")
      }
      expect(ready.status).toBe(503)
      expect(ready.body).toMatchObject({ code: "NOT_READY", error: expect.stringContaining("database not answering") })
      const recovered = yield* eventually(
        "the order to be read again once the database answers",
        send("GET", `/merchant/orders/${order.id}`),
        (response) => response.status === 200,
        { every: "200 millis" }
      )
      expect(recovered.body.id).toBe(order.id)
    })
  )

  it.effect("7. what Node's parser refuses is answered with an {error, code} body", () =>
    Effect.gen(function* () {
      const at = yield* port
      const request = (head: string) => `${head}\r\nHost: test\r\n`
      const cases: ReadonlyArray<[string, ReadonlyArray<string | number>, number, string]> = [
        [
          "duplicate content-length",
          [`${request("POST /auth/challenge HTTP/1.1")}Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}`],
          400,
          "BAD_REQUEST"
        ],
        [
          "negative content-length",
          [`${request("POST /auth/challenge HTTP/1.1")}Content-Length: -1\r\n\r\n`],
          400,
          "BAD_REQUEST"
        ],
        [
          "content-length with transfer-encoding",
          [
            `${request("POST /auth/challenge HTTP/1.1")}Content-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n`
          ],
          400,
          "BAD_REQUEST"
        ],
        ["unknown method", [`${request("BREW /health HTTP/1.1")}\r\n`], 400, "BAD_REQUEST"],
        ["raw spaces in the path", [`${request("GET /mer chant/orders HTTP/1.1")}\r\n`], 400, "BAD_REQUEST"],
        [
          "headers over 16 KiB",
          [`${request("GET /health HTTP/1.1")}X-Big: ${"a".repeat(20_000)}\r\n\r\n`],
          431,
          "HEADERS_TOO_LARGE"
        ],
        ["HTTP/1.1 without Host", ["GET /health HTTP/1.1\r\n\r\n"], 400, "BAD_REQUEST"],
        [
          "a body that never arrives",
          [`${request("POST /auth/challenge HTTP/1.1")}Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{`],
          408,
          "REQUEST_TIMEOUT"
        ],
        ["headers that never end", [`${request("GET /health HTTP/1.1")}X-Slow: 1\r\n`], 408, "REQUEST_TIMEOUT"]
      ]
      for (const [name, parts, status, code] of cases) {
        const response = yield* rawRequest(at, parts)
        expect(response.status, name).toBe(status)
        expect(JSON.parse(response.body), name).toMatchObject({ code, error: expect.any(String) })
      }
      // A connection that never sends anything is answered 408 and closed (after HTTP_HEADERS_TIMEOUT).
      const silent = yield* rawRequest(at, [])
      expect(silent.status).toBe(408)
      expect(silent.headers.connection).toBe("close")
    })
  )

  it.effect("8. a stalled chain is a 503 CHAIN_UNAVAILABLE before anything is reserved; then payments work", () =>
    Effect.gen(function* () {
      const faults = yield* ChainFaults
      const payer = yield* fundedPayer
      const order = yield* createOrder()
      const offer = yield* offerOf(order.id)
      const signed = yield* Effect.promise(() => signPayment(payer, offer))
      yield* faults.stall
      const stalled = yield* pay(order.id, signed.header)
      const ready = yield* send("GET", "/ready")
      yield* faults.resume
      expect(stalled.status).toBe(503)
      expect(stalled.body.code).toBe("CHAIN_UNAVAILABLE")
      expect(stalled.headers["retry-after"]).toBe("2")
      expect(ready.body).toMatchObject({ code: "NOT_READY", error: expect.stringContaining("chain not answering") })
      expect(yield* settlementsOf(order.id)).toEqual([])
      expect(yield* orderStatus(order.id)).toBe("open")
      expect((yield* pay(order.id, signed.header)).status).toBe(200)
    })
  )

  it.effect(
    "9. after the reservation, database or chain trouble is 200 or 202, never a failure, and the order is paid once",
    () =>
      Effect.gen(function* () {
        const faults = yield* ChainFaults
        const proxy = yield* DatabaseProxy
        const chain = yield* InMemoryChain
        const payer = yield* fundedPayer
        const transfersBefore = (yield* chain.transfers).length

        // The database goes down once the transfer is recorded: the receipt proves the payment.
        const first = yield* createOrder("3")
        const firstOffer = yield* offerOf(first.id)
        const firstPayment = yield* Effect.promise(() => signPayment(payer, firstOffer))
        yield* faults.afterRecord(Effect.sync(() => proxy.setMode("refuse")))
        const whileDown = yield* pay(first.id, firstPayment.header)
        proxy.setMode("forward")
        expect([200, 202]).toContain(whileDown.status)
        yield* eventuallyPaid(first.id)

        // The chain stops answering once the transfer is sent: the outcome is unknown, so 202.
        const second = yield* createOrder("4")
        const secondOffer = yield* offerOf(second.id)
        const secondPayment = yield* Effect.promise(() => signPayment(payer, secondOffer))
        yield* faults.afterRecord(faults.stall)
        const whileStalled = yield* pay(second.id, secondPayment.header)
        expect(whileStalled.status).toBe(202)
        expect(whileStalled.body).toMatchObject({ id: second.id, status: "settling" })
        expect(whileStalled.headers.location).toBe(`/merchant/orders/${second.id}`)
        yield* faults.resume
        yield* eventuallyPaid(second.id)

        const transfers = (yield* chain.transfers).slice(transfersBefore)
        expect(transfers.map((transfer) => transfer.value)).toEqual(
          [firstOffer, secondOffer].map((offer) => BigInt(offer.accepts[0]!.amount))
        )
      })
  )

  it.effect("10. error messages never echo a large input", () =>
    Effect.gen(function* () {
      const inputs: ReadonlyArray<[string, unknown]> = [
        ["/auth/verify", { message: "x".repeat(60_000), signature: "0x00" }],
        ["/merchant/orders", { amount: { big: "9".repeat(60_000) }, description: "x" }],
        ["/auth/challenge", { address: "x".repeat(60_000) }]
      ]
      for (const [path, json] of inputs) {
        const response = yield* send("POST", path, { json })
        expect(response.status, path).toBe(400)
        expect(isErrorBody(response.body, "BAD_REQUEST"), path).toBe(true)
        expect(response.body.error.length, path).toBeLessThanOrEqual(600)
      }
    })
  )
})
