/**
 * Lithic's wire format and signature scheme against Lithic's own examples (pure).
 *
 * Fixtures (test/authorizations/fixtures/lithic/; JSON reformatted, values unchanged):
 * - standard-webhooks-vector.json: the known-answer vector of Lithic's SDK tests, verbatim (secret,
 *   webhook-id, timestamp, payload bytes, signature): lithic-com/lithic-node commit ff515d1
 *   tests/api-resources/webhooks.test.ts (the same in lithic-python and lithic-go's webhook tests).
 * - asa-request-legacy.json: Example A, verbatim: lithic-com/asa-demo-node @ c035c210
 *   webhook/tests/unit/test-handler.js `SAMPLE_ASA_REQUEST` (equal to asa-demo-python's `mock_asa_request`).
 * - asa-request-current.json: Example B, NOT verbatim: every field the SDK's `CardAuthorization`
 *   requires (lithic-node src/resources/card-authorizations.ts), its values from the per-field examples
 *   of Lithic's OpenAPI spec; no complete current-format request is published.
 * - card-transaction-updated.json: verbatim the transaction example of Lithic's OpenAPI spec
 *   (lithic-transaction-api-openapi.yml, list_transactions_response.examples[0].data[0]) with
 *   `"event_type": "card_transaction.updated"` added, as the Events API webhook carries it.
 * The ASA `result` codes are the enum of Lithic's asa-response schema.
 */
import { readFileSync } from "node:fs"
import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck } from "effect"
import type { AuthorizationRequest, Merchant, Outcome } from "../../src/authorizations/CardNetwork.js"
import { DECLINE_REASONS, type DeclineReason } from "../../src/authorizations/Decide.js"
import {
  asaRequestBody,
  asaResponse,
  readMessage,
  transactionUpdatedBody
} from "../../src/authorizations/LithicWire.js"
import { formatSecret, type HeaderBag, secretKey, sign, verify } from "../../src/authorizations/StandardWebhooks.js"

const fixture = (name: string) => readFileSync(new URL(`./fixtures/lithic/${name}.json`, import.meta.url), "utf8")

const vector = JSON.parse(fixture("standard-webhooks-vector")) as {
  readonly secret: string
  readonly webhookId: string
  readonly webhookTimestamp: string
  readonly payload: string
  readonly webhookSignature: string
}
const vectorKey = secretKey(vector.secret)!
const vectorNow = Number(vector.webhookTimestamp) * 1000
const vectorHeaders = {
  "webhook-id": vector.webhookId,
  "webhook-timestamp": vector.webhookTimestamp,
  "webhook-signature": vector.webhookSignature
}
const verifyVector = (headers: HeaderBag, nowMs = vectorNow, key = vectorKey) =>
  verify({ key, body: Buffer.from(vector.payload, "utf8"), headers, nowMs })

/** What `readMessage` answers for a body, the reason of a refusal as a failure. */
const read = (body: string, messageId = "msg_test") =>
  Either.getOrElse(readMessage(body, messageId), (reason) => {
    throw new Error(`refused: ${reason}`)
  })

const refusal = (body: string) =>
  Either.match(readMessage(body, "msg_test"), { onLeft: (reason) => reason, onRight: () => "accepted" })

describe("Standard Webhooks, Lithic's known-answer vector", () => {
  it("the vector verifies, and signing its payload gives its signature", () => {
    expect(vectorKey).toHaveLength(24)
    expect(verifyVector(vectorHeaders)).toEqual({ valid: true, messageId: vector.webhookId })
    expect(sign(vectorKey, vector.webhookId, vector.payload, vectorNow)).toEqual(vectorHeaders)
  })

  it("a timestamp 6 minutes (360 s) off either way is stale; within 5 minutes it passes", () => {
    expect(verifyVector(vectorHeaders, vectorNow + 360_000)).toEqual({ valid: false, why: "stale" })
    expect(verifyVector(vectorHeaders, vectorNow - 360_000)).toEqual({ valid: false, why: "stale" })
    expect(verifyVector(vectorHeaders, vectorNow + 300_000).valid).toBe(true)
    expect(verifyVector(vectorHeaders, vectorNow - 300_000).valid).toBe(true)
  })

  it("a signature made with another secret does not match", () => {
    // The SDK's wrong secret, whsec_ + base64("foo"): too short to configure here, so its key is used directly.
    expect(secretKey(`whsec_${Buffer.from("foo").toString("base64")}`)).toBeUndefined()
    const forged = sign(Buffer.from("foo"), vector.webhookId, vector.payload, vectorNow)
    expect(verifyVector(forged)).toEqual({ valid: false, why: "bad-signature" })
  })

  it("a list with a bad and a good v1 signature passes; a v2-only or unversioned signature fails", () => {
    const good = vector.webhookSignature
    const sig = good.slice("v1,".length)
    const withSignature = (signature: string) => ({ ...vectorHeaders, "webhook-signature": signature })
    const bad = `v1,${Buffer.from("my_sig").toString("base64")}`
    expect(verifyVector(withSignature(`${bad} ${good}`)).valid).toBe(true)
    expect(verifyVector(withSignature(`v2,${sig} ${good}`)).valid).toBe(true)
    expect(verifyVector(withSignature(`v2,${sig}`))).toEqual({ valid: false, why: "bad-signature" })
    expect(verifyVector(withSignature("just_a_signature"))).toEqual({ valid: false, why: "bad-signature" })
  })

  it("another webhook-id, or a changed payload, does not match; a missing header is missing", () => {
    expect(verifyVector({ ...vectorHeaders, "webhook-id": "wrong" })).toEqual({ valid: false, why: "bad-signature" })
    expect(
      verify({ key: vectorKey, body: Buffer.from(`${vector.payload} `), headers: vectorHeaders, nowMs: vectorNow })
    ).toEqual({ valid: false, why: "bad-signature" })
    for (const name of ["webhook-id", "webhook-timestamp", "webhook-signature"] as const) {
      expect(verifyVector({ ...vectorHeaders, [name]: undefined })).toEqual({ valid: false, why: "missing" })
    }
  })
})

describe("Standard Webhooks, properties", () => {
  const key = FastCheck.uint8Array({ minLength: 16, maxLength: 64 }).map((bytes) => Buffer.from(bytes))
  const messageId = FastCheck.stringMatching(/^msg_[A-Za-z0-9]{1,40}$/)
  const body = FastCheck.uint8Array({ maxLength: 2000 })
  const nowMs = FastCheck.integer({ min: 0, max: 4_000_000_000_000 })

  it.prop("a secret's key reads back from its whsec_ form", [key], ([bytes]) => {
    expect(secretKey(formatSecret(bytes))).toEqual(bytes)
  })

  it.prop(
    "what is signed verifies, received up to 5 minutes before or after its timestamp",
    [key, messageId, body, nowMs, FastCheck.integer({ min: -299_000, max: 299_000 })],
    ([bytes, id, payload, now, skew]) => {
      const headers = sign(bytes, id, payload, now)
      expect(verify({ key: bytes, body: payload, headers, nowMs: now + skew })).toEqual({ valid: true, messageId: id })
    }
  )

  it.prop(
    "any flipped bit of the body, or another key, fails",
    [key, key, messageId, body.filter((bytes) => bytes.length > 0), nowMs, FastCheck.nat(), FastCheck.nat({ max: 7 })],
    ([bytes, other, id, payload, now, at, bit]) => {
      const headers = sign(bytes, id, payload, now)
      const flipped = new Uint8Array(payload)
      flipped[at % flipped.length] = flipped[at % flipped.length]! ^ (1 << bit)
      expect(verify({ key: bytes, body: flipped, headers, nowMs: now })).toEqual({ valid: false, why: "bad-signature" })
      FastCheck.pre(!other.equals(bytes))
      expect(verify({ key: other, body: payload, headers, nowMs: now })).toEqual({ valid: false, why: "bad-signature" })
    }
  )
})

describe("Lithic's example messages", () => {
  it("Example A (asa-demo, legacy format) reads as an authorization request", () => {
    expect(read(fixture("asa-request-legacy"), "msg_a")).toEqual({
      kind: "authorization",
      messageId: "msg_a",
      authorizationId: "7842e70e-2b17-47ca-8541-869636bedf6a",
      cardToken: "76b9f589-8935-4e78-8809-7f583bf0fb89",
      amount: 52n * 10_000n,
      merchant: { name: "coffee shop", mcc: "5812", city: "NEW YORK", country: "USA" },
      channel: "online"
    })
  })

  it("Example B (current format) reads as an authorization request", () => {
    expect(read(fixture("asa-request-current"), "msg_b")).toEqual({
      kind: "authorization",
      messageId: "msg_b",
      authorizationId: "00000000-0000-0000-0000-0000000000a1",
      cardToken: "7ef7d65c-9023-4da3-b113-3b8583fd7951",
      amount: 1000n * 10_000n,
      merchant: { name: "COFFEE SHOP", mcc: "5812", city: "NEW YORK", country: "USA" },
      channel: "online"
    })
  })

  it("a card present at the terminal is in person", () => {
    const request = JSON.parse(fixture("asa-request-current"))
    request.pos.entry_mode.card = "PRESENT"
    expect(read(JSON.stringify(request))).toMatchObject({ channel: "in_person" })
  })

  it("the spec's transaction as card_transaction.updated reads as an update; its AUTHORIZATION event was the ASA's", () => {
    expect(read(fixture("card-transaction-updated"), "msg_t")).toEqual({
      kind: "update",
      messageId: "msg_t",
      authorizationId: "c30c2182-1e69-4e0d-b40f-eec0d2a19123",
      cardToken: "aac502f9-aecc-458a-954e-4bcf6edb6123",
      merchant: { name: "SQ *SOMA EATS", mcc: "5812", city: "gosq.com", country: "USA" },
      settled: false,
      events: []
    })
  })

  it("the transaction's lifecycle events read in order, in micros; SETTLED says so", () => {
    const transaction = JSON.parse(fixture("card-transaction-updated"))
    const [authorization] = transaction.events
    const event = (token: string, type: string, cents: number) => ({
      ...authorization,
      token,
      type,
      amount: cents,
      amounts: { ...authorization.amounts, cardholder: { ...authorization.amounts.cardholder, amount: cents } }
    })
    transaction.status = "SETTLED"
    transaction.events = [
      authorization,
      event("e-advice", "AUTHORIZATION_ADVICE", 1700),
      event("e-reversal", "AUTHORIZATION_REVERSAL", 200),
      event("e-clearing", "CLEARING", 1500),
      event("e-expiry", "AUTHORIZATION_EXPIRY", 0),
      event("e-return", "RETURN", -300),
      event("e-inquiry", "BALANCE_INQUIRY", 0)
    ]
    expect(read(JSON.stringify(transaction))).toMatchObject({
      settled: true,
      events: [
        { id: "e-advice", type: "adjustment", amount: 17_000_000n },
        { id: "e-reversal", type: "reversal", amount: 2_000_000n },
        { id: "e-clearing", type: "clearing", amount: 15_000_000n },
        { id: "e-expiry", type: "expiry", amount: 0n },
        { id: "e-return", type: "refund", amount: 3_000_000n }
      ]
    })
  })
})

describe("malformed messages are refused with a reason", () => {
  const current = () => JSON.parse(fixture("asa-request-current"))

  it("without a card", () => {
    const { card: _card, ...request } = current()
    expect(refusal(JSON.stringify(request))).toMatch(/\bcard\b.*missing/)
  })

  it("with a merchant category code that is not four digits", () => {
    const request = current()
    request.merchant.mcc = "58A2"
    expect(refusal(JSON.stringify(request))).toMatch(/mcc.*four digits/)
  })

  it("not JSON, or not a JSON object", () => {
    expect(refusal('{"token": "7842e70e-2b17')).toMatch(/not JSON/)
    expect(refusal("[1, 2]")).toMatch(/not a JSON object/)
  })

  it("a BALANCE_INQUIRY, which this issuer does not decide", () => {
    const request = current()
    request.status = "BALANCE_INQUIRY"
    expect(refusal(JSON.stringify(request))).toMatch(/BALANCE_INQUIRY/)
  })

  it("a request with no amount", () => {
    const { amount: _amount, amounts: _amounts, ...request } = current()
    expect(refusal(JSON.stringify(request))).toMatch(/amount/)
  })

  it("a transaction update without its card token", () => {
    const { card_token: _cardToken, ...transaction } = JSON.parse(fixture("card-transaction-updated"))
    expect(refusal(JSON.stringify(transaction))).toMatch(/card_token.*missing/)
  })
})

describe("the ASA response", () => {
  /** The `result` enum of Lithic's asa-response schema: anything but APPROVED declines. */
  const ASA_RESULTS = [
    "APPROVED",
    "AVS_INVALID",
    "CARD_PAUSED",
    "INSUFFICIENT_FUNDS",
    "UNAUTHORIZED_MERCHANT",
    "VELOCITY_EXCEEDED",
    "DRIVER_NUMBER_INVALID",
    "VEHICLE_NUMBER_INVALID",
    "SUSPECTED_FRAUD",
    "CHALLENGE"
  ]
  const expected: Record<DeclineReason, string> = {
    insufficient_funds: "INSUFFICIENT_FUNDS",
    card_frozen: "CARD_PAUSED",
    card_canceled: "CARD_PAUSED",
    card_expired: "CARD_PAUSED",
    limit_exceeded: "VELOCITY_EXCEEDED",
    merchant_category_blocked: "UNAUTHORIZED_MERCHANT",
    funds_unknown: "INSUFFICIENT_FUNDS",
    allowance_missing: "INSUFFICIENT_FUNDS",
    allowance_exceeded: "INSUFFICIENT_FUNDS",
    stand_in: "INSUFFICIENT_FUNDS"
  }
  const request = read(fixture("asa-request-current")) as AuthorizationRequest

  it("APPROVED with the request's token, and nothing that a re-delivery could answer otherwise", () => {
    const outcome: Outcome = { approved: true, reason: null, available: 15_500_000n }
    expect(asaResponse(request, outcome)).toEqual({ token: "00000000-0000-0000-0000-0000000000a1", result: "APPROVED" })
    expect(asaResponse(request, { ...outcome, available: null })).toEqual(asaResponse(request, outcome))
  })

  it("each decline reason is the documented ASA result closest to it, never APPROVED", () => {
    for (const reason of DECLINE_REASONS) {
      const answer = asaResponse(request, { approved: false, reason, available: null })
      expect(answer, reason).toEqual({ token: request.authorizationId, result: expected[reason] })
      expect(ASA_RESULTS).toContain(answer.result)
    }
  })
})

describe("what the sandbox network sends reads back (Lithic's format both ways)", () => {
  const trimmed = (maxLength: number) =>
    FastCheck.string({ minLength: 1, maxLength })
      .map((text) => text.trim())
      .filter((text) => text.length > 0)
  const merchant: FastCheck.Arbitrary<Merchant> = FastCheck.record({
    name: trimmed(25),
    mcc: FastCheck.stringMatching(/^\d{4}$/),
    city: FastCheck.option(trimmed(40), { nil: null }),
    country: FastCheck.stringMatching(/^[A-Z]{2,3}$/)
  })
  const cents = FastCheck.integer({ min: 0, max: 100_000_000 })
  const at = FastCheck.date({ min: new Date("2000-01-01"), max: new Date("2100-01-01"), noInvalidDate: true })

  it("an ASA request body has every field Lithic's CardAuthorization requires, typed as Lithic types them", () => {
    // The SDK type's non-optional fields (lithic-node src/resources/card-authorizations.ts, shared.ts `Merchant`).
    const body = asaRequestBody({
      token: "00000000-0000-0000-0000-0000000000a1",
      card: { token: "7ef7d65c-9023-4da3-b113-3b8583fd7951", lastFour: "4142" },
      cents: 1000,
      merchant: { name: "COFFEE SHOP", mcc: "5812", city: null, country: "USA" },
      channel: "online",
      created: new Date("2026-01-01T12:00:00Z")
    })
    const fields = (value: object) => Object.keys(value).sort()
    const example = JSON.parse(fixture("asa-request-current"))
    expect(fields(body)).toEqual(
      expect.arrayContaining(fields(example).filter((name) => name !== "network_risk_score"))
    )
    expect(fields(body.card)).toEqual(fields(example.card))
    expect(fields(body.avs)).toEqual(fields(example.avs))
    expect(fields(body.amounts)).toEqual(fields(example.amounts))
    expect(fields(body.merchant)).toEqual(fields(example.merchant))
    for (const name of ["acceptor_id", "acquiring_institution_id", "city", "country", "descriptor", "mcc", "state"]) {
      expect(typeof body.merchant[name as keyof typeof body.merchant], `merchant.${name}`).toBe("string")
    }
    expect(body.created).toBe("2026-01-01T12:00:00Z")
  })

  it.prop(
    "an ASA request body reads as the request it was made from",
    [
      FastCheck.uuid(),
      FastCheck.uuid(),
      FastCheck.stringMatching(/^\d{4}$/),
      cents,
      merchant,
      FastCheck.constantFrom("in_person" as const, "online" as const),
      at
    ],
    ([token, cardToken, lastFour, amount, shop, channel, created]) => {
      const body = asaRequestBody({
        token,
        card: { token: cardToken, lastFour },
        cents: amount,
        merchant: shop,
        channel,
        created
      })
      expect(read(JSON.stringify(body), "msg_p")).toEqual({
        kind: "authorization",
        messageId: "msg_p",
        authorizationId: token,
        cardToken,
        amount: BigInt(amount) * 10_000n,
        merchant: shop,
        channel
      })
    }
  )

  it.prop(
    "a card_transaction.updated body reads as its events, in order",
    [
      FastCheck.uuid(),
      FastCheck.uuid(),
      FastCheck.constantFrom("PENDING" as const, "SETTLED" as const, "VOIDED" as const, "EXPIRED" as const),
      merchant,
      FastCheck.array(
        FastCheck.record({
          id: FastCheck.uuid(),
          type: FastCheck.constantFrom(
            "adjustment" as const,
            "reversal" as const,
            "expiry" as const,
            "clearing" as const,
            "refund" as const
          ),
          cents
        }),
        { maxLength: 8 }
      ),
      at
    ],
    ([token, cardToken, status, shop, events, when]) => {
      const body = transactionUpdatedBody({ token, cardToken, status, merchant: shop, events, at: when })
      expect(read(JSON.stringify(body), "msg_u")).toEqual({
        kind: "update",
        messageId: "msg_u",
        authorizationId: token,
        cardToken,
        merchant: shop,
        settled: status === "SETTLED",
        events: events.map((event) => ({ id: event.id, type: event.type, amount: BigInt(event.cents) * 10_000n }))
      })
    }
  )
})
