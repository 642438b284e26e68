/**
 * The service with `CARD_NETWORK=lithic` against a local stand-in of Lithic (a node:http server in this
 * process, closed after the file): its card API issues and closes the cards, and it plays Lithic's side
 * of Auth Stream Access and of the Events API, signing with Standard Webhooks under its own `whsec_`
 * secrets. The stand-in writes Lithic's messages itself, from Lithic's example messages
 * (fixtures/lithic/, see LithicWire.test.ts), and signs them with its own HMAC code: the service's
 * codec and verifier are what is under test. On the devnet, with real PostgreSQL.
 *
 * Lithic does not document an incremental authorization's ASA request; as the service reads it
 * (src/authorizations/LithicWire.ts), it is a second request with the authorization's token whose
 * amount is the increment.
 */
import { createHmac, randomBytes, randomInt, randomUUID } from "node:crypto"
import { readFileSync } from "node:fs"
import { createServer, type IncomingMessage } from "node:http"
import type { AddressInfo } from "node:net"
import { SqlClient } from "@effect/sql"
import { afterAll, describe, expect, it, layer } from "@effect/vitest"
import { Cause, ConfigProvider, Effect, Exit, Layer, Redacted } from "effect"
import { LithicIssuer } from "../../src/authorizations/LithicIssuer.js"
import { CardIssuer } from "../../src/cards/CardIssuer.js"
import { withCheckDigit } from "../../src/cards/Luhn.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { cardHolder } from "../support/agent.js"
import { fundedCardHolder } from "../support/cards.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

const API_KEY = `lithic-test-key-${randomBytes(8).toString("hex")}`
const whsec = () => `whsec_${randomBytes(32).toString("base64")}`
const ASA_SECRET = whsec()
const EVENTS_SECRET = whsec()

const fixture = (name: string) =>
  JSON.parse(readFileSync(new URL(`./fixtures/lithic/${name}.json`, import.meta.url), "utf8"))

interface StandInCard {
  readonly token: string
  readonly pan: string
  readonly cvv: string
  readonly exp_month: string
  readonly exp_year: string
  readonly memo: string
  state: "OPEN" | "PAUSED" | "CLOSED"
}

interface ApiCall {
  readonly method: string
  readonly url: string
  readonly authorization: string | undefined
  readonly idempotencyKey: string | undefined
  readonly body: Record<string, unknown>
}

/** Lithic's card API as far as the issuer uses it: create a card, change its state. */
const lithic = {
  cards: new Map<string, StandInCard>(),
  byIdempotencyKey: new Map<string, string>(),
  calls: [] as Array<ApiCall>,
  /** Cards made while set come without pan and cvv, as for a program that is not PCI-compliant. */
  withholdPan: false,
  /** The next card created is made, but its answer is a 503 (the answer lost). */
  loseNextAnswer: false
}

const readBody = (request: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let text = ""
    request.on("data", (chunk: Buffer) => {
      text += chunk.toString()
    })
    request.on("end", () => resolve(text))
  })

/** A card as Lithic's API answers it (the create response example's fields). */
const cardJson = (card: StandInCard) => ({
  account_token: "f3f4918c-dee9-464d-a819-4aa42901d624",
  card_program_token: "5e9483eb-8103-4e16-9794-2106111b2eca",
  created: "2026-01-01T00:00:00Z",
  cvv: card.cvv,
  exp_month: card.exp_month,
  exp_year: card.exp_year,
  funding: null,
  hostname: "",
  last_four: card.pan.slice(-4),
  memo: card.memo,
  pan: card.pan,
  spend_limit: 0,
  spend_limit_duration: "FOREVER",
  state: card.state,
  token: card.token,
  type: "VIRTUAL",
  pin_status: "NOT_SET"
})

const standIn = createServer(async (request, response) => {
  const json = (status: number, body: unknown) =>
    response.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(body))
  const text = await readBody(request)
  const body = text === "" ? {} : (JSON.parse(text) as Record<string, unknown>)
  const header = (name: string) => {
    const value = request.headers[name]
    return Array.isArray(value) ? value.join(",") : value
  }
  lithic.calls.push({
    method: request.method ?? "",
    url: request.url ?? "",
    authorization: header("authorization"),
    idempotencyKey: header("idempotency-key"),
    body
  })
  const debugging_request_id = randomUUID()
  if (header("authorization") !== API_KEY) {
    return json(401, { debugging_request_id, message: "Please provide API key in the form Authorization: [api-key]" })
  }
  if (request.method === "POST" && request.url === "/v1/cards") {
    const key = header("idempotency-key")
    const known = key === undefined ? undefined : lithic.byIdempotencyKey.get(key)
    if (known !== undefined) return json(200, cardJson(lithic.cards.get(known)!))
    const card: StandInCard = {
      token: randomUUID(),
      pan: withCheckDigit(`4111${String(randomInt(10 ** 11)).padStart(11, "0")}`),
      cvv: String(randomInt(1000)).padStart(3, "0"),
      exp_month: "06",
      exp_year: String(new Date().getUTCFullYear() + 3),
      memo: String(body.memo ?? ""),
      state: body.state === "PAUSED" ? "PAUSED" : "OPEN"
    }
    lithic.cards.set(card.token, card)
    if (key !== undefined) lithic.byIdempotencyKey.set(key, card.token)
    if (lithic.loseNextAnswer) {
      lithic.loseNextAnswer = false
      return json(503, { debugging_request_id, message: "Service unavailable" })
    }
    const { pan: _pan, cvv: _cvv, ...withheld } = cardJson(card)
    return json(200, lithic.withholdPan ? withheld : cardJson(card))
  }
  const patch = /^\/v1\/cards\/([0-9a-f-]{36})$/.exec(request.url ?? "")
  if (request.method === "PATCH" && patch !== null) {
    const card = lithic.cards.get(patch[1]!)
    if (card === undefined) return json(404, { debugging_request_id, message: "Card not found" })
    if (card.state === "CLOSED") return json(400, { debugging_request_id, message: "Card is closed" })
    if (body.state === "OPEN" || body.state === "PAUSED" || body.state === "CLOSED") card.state = body.state
    return json(200, cardJson(card))
  }
  return json(404, { debugging_request_id, message: "Not found" })
})
await new Promise<void>((resolve) => standIn.listen(0, "127.0.0.1", resolve))
const LITHIC_URL = `http://127.0.0.1:${(standIn.address() as AddressInfo).port}`
afterAll(
  () =>
    new Promise<void>((resolve) => {
      standIn.closeAllConnections()
      standIn.close(() => resolve())
    })
)

// -------------------------------------------------------------------------------------------------
// Lithic's side of ASA and of the Events API

/** Standard Webhooks headers, computed here rather than with the service's own code. */
const signed = (secret: string, body: string, options: { readonly at?: number; readonly id?: string } = {}) => {
  const id = options.id ?? `msg_${randomBytes(12).toString("hex")}`
  const timestamp = String(Math.floor((options.at ?? Date.now()) / 1000))
  const key = Buffer.from(secret.slice("whsec_".length), "base64")
  const signature = createHmac("sha256", key).update(`${id}.${timestamp}.${body}`).digest("base64")
  return { "webhook-id": id, "webhook-timestamp": timestamp, "webhook-signature": `v1,${signature}` }
}

const deliver = (body: string, headers: Record<string, string>) =>
  send("POST", "/card-network/messages", { text: body, headers })

/** An ASA request in Lithic's current format (Example B with this transaction's values). */
const asaBody = (input: { readonly token: string; readonly cardToken: string; readonly cents: number }) => {
  const request = fixture("asa-request-current")
  const amount = { amount: input.cents, currency: "USD" }
  return JSON.stringify({
    ...request,
    token: input.token,
    created: new Date().toISOString().replace(/\.\d{3}Z$/, "Z"),
    amount: input.cents,
    authorization_amount: input.cents,
    merchant_amount: input.cents,
    amounts: {
      ...request.amounts,
      cardholder: { ...amount, conversion_rate: "1.000000" },
      hold: amount,
      merchant: amount
    },
    card: { ...request.card, token: input.cardToken, spend_limit: 0 }
  })
}

type WireEvent = readonly [token: string, type: string, cents: number]

/**
 * A `card_transaction.updated` webhook in Lithic's format (the spec's transaction example with this
 * transaction's values): the transaction and all its events so far.
 */
const transactionBody = (input: {
  readonly token: string
  readonly cardToken: string
  readonly status: "PENDING" | "SETTLED" | "VOIDED" | "EXPIRED"
  readonly events: ReadonlyArray<WireEvent>
}) => {
  const transaction = fixture("card-transaction-updated")
  const [template] = transaction.events
  return JSON.stringify({
    ...transaction,
    token: input.token,
    card_token: input.cardToken,
    status: input.status,
    merchant: fixture("asa-request-current").merchant,
    events: input.events.map(([token, type, cents]) => ({
      ...template,
      token,
      type,
      amount: cents,
      amounts: {
        cardholder: { amount: cents, conversion_rate: "1.000000", currency: "USD" },
        merchant: { amount: cents, currency: "USD" },
        settlement: type === "CLEARING" ? { amount: cents, currency: "USD" } : null
      }
    }))
  })
}

/** Lithic asks the issuer about an amount on a card; its answer (status and ASA response). */
const askIssuer = (input: { readonly token: string; readonly cardToken: string; readonly cents: number }) =>
  Effect.gen(function* () {
    const body = asaBody(input)
    const answer = yield* deliver(body, signed(ASA_SECRET, body))
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    return answer.body as { token: string; result: string }
  })

const tellIssuer = (input: Parameters<typeof transactionBody>[0]) =>
  Effect.gen(function* () {
    const body = transactionBody(input)
    const answer = yield* deliver(body, signed(EVENTS_SECRET, body))
    expect(answer.status, JSON.stringify(answer.body)).toBe(200)
    expect(answer.body).toEqual({ received: true })
  })

// -------------------------------------------------------------------------------------------------
// What the service stored

const authorizationRow = (id: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        network: string
        approved: boolean
        reason: string | null
        approvedMicros: string
        heldMicros: string
        clearedMicros: string
        status: string
      }>`SELECT network, approved, reason, approved_micros::text, held_micros::text, cleared_micros::text, status
       FROM card_authorizations WHERE id = ${id}`
  ).pipe(
    Effect.map((rows) => rows[0]),
    Effect.orDie
  )

const networkEvents = (transactionId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ id: string; kind: string; amountMicros: string; approved: boolean | null; money: string | null }>`
      SELECT id, kind, amount_micros::text, approved, money FROM card_network_events
      WHERE transaction_id = ${transactionId} ORDER BY seq`
  ).pipe(Effect.orDie)

const storedCard = (address: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ issuer: string; issuerRef: string }>`SELECT issuer, issuer_ref FROM cards WHERE address = ${address}`
  ).pipe(
    Effect.map((rows) => rows[0]!),
    Effect.orDie
  )

/** The holder's card as the stand-in issued it. */
const lithicCardOf = (address: string) => Effect.map(storedCard(address), (card) => lithic.cards.get(card.issuerRef)!)

const env = {
  CARD_NETWORK: "lithic",
  LITHIC_API_URL: LITHIC_URL,
  LITHIC_API_KEY: API_KEY,
  LITHIC_ASA_SECRET: ASA_SECRET,
  LITHIC_EVENTS_SECRET: EVENTS_SECRET
}

describe("Lithic as the card network and issuer, against a stand-in (devnet)", () => {
  layer(testServer(env, { kycProvider: ScriptedKycProvider.layer() }), { excludeTestServices: true })((it) => {
    it.effect("the identity check's card is issued by Lithic: we keep its token and the sealed face", () =>
      Effect.gen(function* () {
        const before = lithic.calls.length
        const holder = yield* cardHolder()
        const [create] = lithic.calls.slice(before)
        expect(lithic.calls.length - before).toBe(1)
        expect(create).toMatchObject({
          method: "POST",
          url: "/v1/cards",
          authorization: API_KEY,
          body: { type: "VIRTUAL", memo: holder.account.address, state: "OPEN" }
        })
        expect(create!.idempotencyKey).toMatch(/^[0-9a-f-]{36}$/)

        const stored = yield* storedCard(holder.account.address)
        const card = lithic.cards.get(stored.issuerRef)
        expect(stored.issuer).toBe("lithic")
        expect(card).toBeDefined()
        const me = yield* send("GET", "/me", { headers: bearer(holder.token) })
        expect(me.body.card).toMatchObject({
          number: card!.pan,
          cvv: card!.cvv,
          expiry: `06/${card!.exp_year.slice(-2)}`
        })
      })
    )

    it.effect("approve, decline, increment, partial reversal and a clearing above the hold, over Lithic's wire", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("20")
        const cardToken = (yield* storedCard(holder.account.address)).issuerRef
        const coffee = randomUUID()

        // Approved: a $4.50 hold.
        expect(yield* askIssuer({ token: coffee, cardToken, cents: 450 })).toEqual({
          token: coffee,
          result: "APPROVED"
        })
        expect(yield* authorizationRow(coffee)).toEqual({
          network: "lithic",
          approved: true,
          reason: null,
          approvedMicros: "4500000",
          heldMicros: "4500000",
          clearedMicros: "0",
          status: "pending"
        })

        // Declined: more than the card wallet holds.
        const television = randomUUID()
        expect(yield* askIssuer({ token: television, cardToken, cents: 100_000 })).toMatchObject({
          token: television,
          result: "INSUFFICIENT_FUNDS"
        })
        expect(yield* authorizationRow(television)).toMatchObject({
          approved: false,
          reason: "insufficient_funds",
          heldMicros: "0",
          status: "declined"
        })

        // Incremented: a second request on the same token raises the hold by $2.00.
        expect(yield* askIssuer({ token: coffee, cardToken, cents: 200 })).toMatchObject({
          token: coffee,
          result: "APPROVED"
        })
        expect(yield* authorizationRow(coffee)).toMatchObject({ approvedMicros: "6500000", heldMicros: "6500000" })

        // Partly reversed: $1.50 of the hold released.
        const events: Array<WireEvent> = [
          [randomUUID(), "AUTHORIZATION", 450],
          [randomUUID(), "AUTHORIZATION", 200],
          [randomUUID(), "AUTHORIZATION_REVERSAL", 150]
        ]
        yield* tellIssuer({ token: coffee, cardToken, status: "PENDING", events })
        expect(yield* authorizationRow(coffee)).toMatchObject({
          approvedMicros: "5000000",
          heldMicros: "5000000",
          clearedMicros: "0",
          status: "pending"
        })

        // Cleared for $5.75 (a tip over the $5.00 held) and settled: nothing held, the clearing debit pending.
        events.push([randomUUID(), "CLEARING", 575])
        const settled = { token: coffee, cardToken, status: "SETTLED", events } as const
        yield* tellIssuer(settled)
        // Lithic re-delivers: each event counts once.
        yield* tellIssuer(settled)
        expect(yield* authorizationRow(coffee)).toMatchObject({
          approved: true,
          approvedMicros: "5000000",
          heldMicros: "0",
          clearedMicros: "5750000",
          status: "pending"
        })
        const stored = yield* networkEvents(coffee)
        expect(stored.map(({ id: _id, ...event }) => event)).toEqual([
          { kind: "increment", amountMicros: "2000000", approved: true, money: null },
          { kind: "reversal", amountMicros: "1500000", approved: null, money: null },
          { kind: "clearing", amountMicros: "5750000", approved: null, money: "debit_pending" }
        ])
        expect(stored.slice(1).map((event) => event.id)).toEqual([events[2]![0], events[3]![0]])

        const list = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
        expect(list.status).toBe(200)
        expect(list.body).toMatchObject([
          { id: television, approved: false, reason: "insufficient_funds", amountUsd: 1000, heldUsd: 0 },
          {
            id: coffee,
            approved: true,
            amountUsd: 5,
            heldUsd: 0,
            clearedUsd: 5.75,
            status: "pending",
            channel: "online",
            merchant: { name: "COFFEE SHOP", categoryCode: "5812", city: "NEW YORK", country: "USA" }
          }
        ])
      })
    )

    it.effect("a frozen card answers CARD_PAUSED; a replaced card is closed at Lithic and its old token declines", () =>
      Effect.gen(function* () {
        const holder = yield* cardHolder()
        const oldCard = yield* lithicCardOf(holder.account.address)
        const controls = (json: unknown) =>
          send("PUT", "/card/controls", { headers: bearer(holder.token), json }).pipe(
            Effect.tap((response) => expect(response.status, JSON.stringify(response.body)).toBe(200))
          )

        yield* controls({ frozen: true })
        const frozen = randomUUID()
        expect(yield* askIssuer({ token: frozen, cardToken: oldCard.token, cents: 100 })).toMatchObject({
          result: "CARD_PAUSED"
        })
        expect(yield* authorizationRow(frozen)).toMatchObject({ approved: false, reason: "card_frozen" })
        yield* controls({ frozen: false })

        const replaced = yield* send("POST", "/card/replace", { headers: bearer(holder.token) })
        expect(replaced.status, JSON.stringify(replaced.body)).toBe(200)
        const newCard = yield* lithicCardOf(holder.account.address)
        expect(newCard.token).not.toBe(oldCard.token)
        expect(replaced.body.number).toBe(newCard.pan)
        expect(oldCard.state).toBe("CLOSED")
        expect(lithic.calls.at(-1)).toMatchObject({
          method: "PATCH",
          url: `/v1/cards/${oldCard.token}`,
          authorization: API_KEY,
          body: { state: "CLOSED" }
        })

        const lost = randomUUID()
        expect(yield* askIssuer({ token: lost, cardToken: oldCard.token, cents: 100 })).toMatchObject({
          result: "CARD_PAUSED"
        })
        expect(yield* authorizationRow(lost)).toMatchObject({ approved: false, reason: "card_canceled" })
      })
    )

    it.effect("a message signed with another secret, or replayed past 5 minutes, gets 401 and stores nothing", () =>
      Effect.gen(function* () {
        const holder = yield* cardHolder()
        const cardToken = (yield* storedCard(holder.account.address)).issuerRef
        const token = randomUUID()
        const body = asaBody({ token, cardToken, cents: 100 })

        const forged = yield* deliver(body, signed(whsec(), body))
        expect(forged.status).toBe(401)
        expect(forged.body).toMatchObject({ code: "NETWORK_SIGNATURE_INVALID" })
        const stale = yield* deliver(body, signed(ASA_SECRET, body, { at: Date.now() - 6 * 60_000 }))
        expect(stale.status).toBe(401)
        const update = transactionBody({
          token,
          cardToken,
          status: "SETTLED",
          events: [[randomUUID(), "CLEARING", 100]]
        })
        expect((yield* deliver(update, signed(whsec(), update))).status).toBe(401)
        expect(yield* authorizationRow(token)).toBeUndefined()
        expect(yield* networkEvents(token)).toEqual([])

        // The same request delivered twice (a retry after a lost answer): one decision, answered alike.
        const headers = signed(ASA_SECRET, body)
        const first = yield* deliver(body, headers)
        const again = yield* deliver(body, headers)
        expect(first.status).toBe(200)
        expect(again.body).toMatchObject({ token, result: first.body.result })
        expect(yield* authorizationRow(token)).toBeDefined()
        expect(yield* networkEvents(token)).toEqual([])
      })
    )

    it.effect("the sandbox network's routes are not served: 404", () =>
      Effect.gen(function* () {
        const swipe = yield* send("POST", "/sandbox/card-network/authorizations", {
          json: {
            cardNumber: "4111111111111111",
            expiry: "06/30",
            cvv: "123",
            amountUsd: "1.00",
            merchant: { name: "COFFEE SHOP", mcc: "5812", country: "USA" }
          }
        })
        expect(swipe.status).toBe(404)
        const clear = yield* send("POST", `/sandbox/card-network/authorizations/${randomUUID()}/clear`, { json: {} })
        expect(clear.status).toBe(404)
      })
    )
  })
})

describe("the Lithic issuer against the stand-in's failures", () => {
  const issuerWith = (apiKey: string) =>
    LithicIssuer.pipe(
      Layer.provide(Layer.setConfigProvider(ConfigProvider.fromJson({ ...env, LITHIC_API_KEY: apiKey })))
    )
  const issue = Effect.flatMap(CardIssuer, (issuer) =>
    issuer.issue({ address: "0x0000000000000000000000000000000000000001", holder: "Ada Lovelace", now: Date.now() })
  )
  /** The defect's message, which must say why and carry no secret. */
  const defectOf = <A, E>(exit: Exit.Exit<A, E>) => {
    expect(Exit.isFailure(exit) && Cause.isDie(exit.cause)).toBe(true)
    return Exit.isFailure(exit) ? Cause.pretty(exit.cause) : ""
  }

  it.live("a lost answer is retried with the same Idempotency-Key: one card", () =>
    Effect.gen(function* () {
      const before = lithic.calls.length
      lithic.loseNextAnswer = true
      const card = yield* issue.pipe(Effect.provide(issuerWith(API_KEY)))
      const calls = lithic.calls.slice(before)
      expect(calls.map((call) => call.method)).toEqual(["POST", "POST"])
      expect(calls[1]!.idempotencyKey).toBe(calls[0]!.idempotencyKey)
      expect(Redacted.value(card.number)).toBe(lithic.cards.get(card.issuerRef)!.pan)
      expect(lithic.byIdempotencyKey.get(calls[0]!.idempotencyKey!)).toBe(card.issuerRef)
    })
  )

  it.live("a refused API key is a defect naming the call and Lithic's words, not the key", () =>
    Effect.gen(function* () {
      const wrongKey = `wrong-${randomBytes(8).toString("hex")}`
      const message = defectOf(yield* Effect.exit(issue.pipe(Effect.provide(issuerWith(wrongKey)))))
      expect(message).toContain("Lithic POST /v1/cards failed: Lithic answered HTTP 401: Please provide API key")
      expect(message).not.toContain(wrongKey)
    })
  )

  it.live("a card answered without its pan and cvv is closed at once, and issuance dies saying why", () =>
    Effect.gen(function* () {
      const before = lithic.calls.length
      lithic.withholdPan = true
      const exit = yield* Effect.exit(issue.pipe(Effect.provide(issuerWith(API_KEY))))
      lithic.withholdPan = false
      const message = defectOf(exit)
      const [create, close] = lithic.calls.slice(before)
      const token = [...lithic.byIdempotencyKey].find(([key]) => key === create!.idempotencyKey)![1]
      expect(close).toMatchObject({ method: "PATCH", url: `/v1/cards/${token}`, body: { state: "CLOSED" } })
      expect(lithic.cards.get(token)!.state).toBe("CLOSED")
      expect(message).toContain(`Lithic issued card ${token} without a readable pan, cvv and expiry`)
      expect(message).toContain("it was closed")
    })
  )
})
