import { describe, expect, it } from "@effect/vitest"
import { Either, FastCheck } from "effect"
import { microsToAtomic, orderTag, parseAmount } from "../../src/merchant/Money.js"
import {
  type Authorization,
  CLOCK_SKEW_SECONDS,
  checkAuthorization,
  checkResource,
  decodePaymentHeader,
  encodeHeader,
  matchesOffer,
  type PaymentPayload,
  type PaymentRequirements,
  Reason,
  requirementsFor
} from "../../src/merchant/X402.js"

const hex = (bytes: number) =>
  FastCheck.uint8Array({ minLength: bytes, maxLength: bytes }).map((b) => `0x${Buffer.from(b).toString("hex")}`)
const address = hex(20)
const decimal = FastCheck.bigInt({ min: 0n, max: 2n ** 128n }).map(String)

const requirements = FastCheck.record({
  chainId: FastCheck.integer({ min: 1, max: 2 ** 31 }),
  asset: address,
  payTo: address,
  amountAtomic: FastCheck.bigInt({ min: 1n, max: 2n ** 100n }),
  maxTimeoutSeconds: FastCheck.integer({ min: 1, max: 3600 })
}).map((offer) =>
  requirementsFor({
    ...offer,
    asset: offer.asset as `0x${string}`,
    payTo: offer.payTo as `0x${string}`,
    domain: { name: "World Liberty Financial USD", version: "1" }
  })
)

const payload = FastCheck.record({
  accepted: requirements,
  from: address,
  to: address,
  value: decimal,
  validAfter: decimal,
  validBefore: decimal,
  nonce: hex(32),
  signature: hex(65)
}).map(
  (p): PaymentPayload => ({
    x402Version: 2,
    accepted: p.accepted,
    payload: {
      signature: p.signature,
      authorization: {
        from: p.from,
        to: p.to,
        value: p.value,
        validAfter: p.validAfter,
        validBefore: p.validBefore,
        nonce: p.nonce
      }
    }
  })
)

describe("x402 header codec", () => {
  it.prop("a PaymentPayload survives encode then decode", [payload], ([p]) => {
    const header = encodeHeader(p)
    expect(header).toMatch(/^[A-Za-z0-9+/]*={0,2}$/)
    expect(decodePaymentHeader(header)).toEqual(Either.right(p))
  })

  it.prop("anything that is not base64 JSON of a v2 payload is invalid_payload", [FastCheck.string()], ([text]) => {
    const decoded = decodePaymentHeader(text)
    if (Either.isRight(decoded)) expect(Buffer.from(text, "base64").toString("utf8")).toContain('"x402Version":2')
    else expect(decoded.left).toBe("invalid_payload")
  })

  it("refuses base64url, a v1 payload and an oversized header", () => {
    expect(decodePaymentHeader("-_-_")).toEqual(Either.left("invalid_payload"))
    expect(decodePaymentHeader(encodeHeader({ x402Version: 1, scheme: "exact" }))).toEqual(
      Either.left("invalid_payload")
    )
    expect(decodePaymentHeader("A".repeat(40_000))).toEqual(Either.left("invalid_payload"))
  })
})

describe("matching and authorization checks", () => {
  it.prop(
    "an offer matches itself, in any address letter case, and not with any core field changed",
    [requirements],
    ([offer]) => {
      expect(matchesOffer(offer, offer)).toBe(true)
      expect(matchesOffer({ ...offer, payTo: offer.payTo.toUpperCase().replace("0X", "0x") }, offer)).toBe(true)
      expect(matchesOffer({ ...offer, amount: `${offer.amount}0` }, offer)).toBe(false)
      expect(matchesOffer({ ...offer, network: "eip155:1" }, { ...offer, network: "eip155:2" })).toBe(false)
      expect(matchesOffer({ ...offer, maxTimeoutSeconds: offer.maxTimeoutSeconds + 1 }, offer)).toBe(false)
      expect(matchesOffer({ ...offer, extra: { name: "USD Coin", version: "1" } }, offer)).toBe(false)
      // Our extra must be included in theirs; more is fine.
      expect(matchesOffer({ ...offer, extra: { ...offer.extra, assetTransferMethod: "eip3009" } }, offer)).toBe(true)
    }
  )

  const authorizationFor = (offer: PaymentRequirements, now: number, overrides: Partial<Authorization> = {}) => ({
    from: `0x${"11".repeat(20)}`,
    to: offer.payTo,
    value: offer.amount,
    validAfter: "0",
    // as a standard client signs it
    validBefore: String(now + offer.maxTimeoutSeconds),
    nonce: `0x${"22".repeat(32)}`,
    ...overrides
  })

  it.prop(
    "the window is validAfter <= now < validBefore - 6 s, validBefore <= now + maxTimeoutSeconds + 30 s, the value exact, the recipient payTo",
    [
      requirements.filter((offer) => offer.maxTimeoutSeconds >= 6),
      FastCheck.integer({ min: 1_000_000, max: 2_000_000_000 }),
      FastCheck.integer({ min: -100, max: 100 })
    ],
    ([offer, now, shift]) => {
      const check = (overrides: Partial<Authorization>) =>
        checkAuthorization(authorizationFor(offer, now, overrides), offer, now)
      const latest = now + offer.maxTimeoutSeconds + CLOCK_SKEW_SECONDS
      const windowSays = (validBefore: number) =>
        validBefore < now + 6
          ? Either.left("invalid_exact_evm_payload_authorization_valid_before")
          : validBefore > latest
            ? Either.left(Reason.validBeforeTooLate)
            : Either.void
      expect(check({})).toEqual(Either.void)
      for (const validBefore of [now + 6 + shift, latest + shift]) {
        expect(check({ validBefore: String(validBefore) })).toEqual(windowSays(validBefore))
      }
      expect(check({ validBefore: (2n ** 255n).toString() })).toEqual(Either.left(Reason.validBeforeTooLate))
      expect(check({ validAfter: String(now + shift) })).toEqual(
        shift <= 0 ? Either.void : Either.left("invalid_exact_evm_payload_authorization_valid_after")
      )
      expect(check({ value: String(BigInt(offer.amount) + 1n) })).toEqual(
        Either.left("invalid_exact_evm_payload_authorization_value_mismatch")
      )
      expect(check({ to: `0x${"33".repeat(20)}` })).toEqual(Either.left("invalid_exact_evm_recipient_mismatch"))
    }
  )
})

describe("order amounts", () => {
  it.prop(
    "every amount with at most 6 decimals in (0, 1000000] parses to its exact micros",
    [FastCheck.bigInt({ min: 1n, max: 1_000_000_000_000n }), FastCheck.integer({ min: 0, max: 3 })],
    ([micros, padding]) => {
      const whole = micros / 1_000_000n
      const fraction = (micros % 1_000_000n).toString().padStart(6, "0")
      const text = `${"0".repeat(padding)}${whole}.${fraction}`
      const parsed = parseAmount(text)
      expect(Either.isRight(parsed)).toBe(true)
      if (Either.isRight(parsed)) {
        expect(parsed.right.micros).toBe(micros)
        expect(parseAmount(parsed.right.normalized)).toEqual(parsed)
        expect(parsed.right.normalized).not.toMatch(/\.\d*0$|^0\d/)
      }
      expect(microsToAtomic(micros, 18)).toBe(micros * 10n ** 12n)
      expect(microsToAtomic(micros, 6)).toBe(micros)
    }
  )

  it.prop(
    "an order's own value lies below one micro-dollar of the token, and is always the same for the order",
    [FastCheck.string({ minLength: 1, maxLength: 30 }), FastCheck.integer({ min: 0, max: 30 })],
    ([id, decimals]) => {
      const tag = orderTag(id, decimals)
      expect(tag).toBe(orderTag(id, decimals))
      expect(tag >= 0n && tag < microsToAtomic(1n, Math.max(decimals, 6))).toBe(true)
      if (decimals <= 6) expect(tag).toBe(0n)
    }
  )

  it("orders ask for values of their own: 1,000 ids, 1,000 values (18 decimals)", () => {
    const ids = Array.from({ length: 1_000 }, (_, i) => `order-${i}`)
    expect(new Set(ids.map((id) => orderTag(id, 18))).size).toBe(1_000)
  })

  it("refuses zero, too many decimals, over a million and anything that is not a plain decimal", () => {
    for (const text of ["0", "0.0", "1.1234567", "1000000.000001", "1e3", "-1", "+1", " 1", "1.", ".5", "abc", ""]) {
      expect(Either.isLeft(parseAmount(text)), text).toBe(true)
    }
    expect(parseAmount("1000000")).toEqual(Either.right({ normalized: "1000000", micros: 1_000_000_000_000n }))
    expect(parseAmount("0.000001")).toEqual(Either.right({ normalized: "0.000001", micros: 1n }))
  })
})

describe("a payment's resource", () => {
  const payUrl = "https://api.example.com/merchant/orders/Abc_123-xyz/pay"
  const naming = (url: string) => ({ resource: { url } }) as unknown as PaymentPayload
  const paysResource = (payload: PaymentPayload, url: string) => Either.isRight(checkResource(payload, url))

  it("binds the payment to its order's pay URL, compared after normalising", () => {
    for (const url of [
      payUrl,
      "HTTPS://API.Example.COM/merchant/orders/Abc_123-xyz/pay",
      "https://api.example.com:443/merchant/orders/Abc_123-xyz/pay",
      "https://api.example.com/merchant/orders/Abc_123-xyz/pay/",
      "https://api.example.com/merchant/orders/Abc_123-xyz/pay?retry=1#top"
    ]) {
      expect(paysResource(naming(url), payUrl), url).toBe(true)
    }
    expect(
      paysResource(naming("http://localhost/merchant/orders/x/pay"), "http://localhost:80/merchant/orders/x/pay")
    ).toBe(true)
  })

  it("refuses another order, another host, port or scheme, a path that differs in case, and what is no URL", () => {
    for (const url of [
      "https://api.example.com/merchant/orders/Other_order/pay",
      "https://api.example.com/merchant/orders/abc_123-xyz/pay",
      "https://evil.example.com/merchant/orders/Abc_123-xyz/pay",
      "https://api.example.com:8443/merchant/orders/Abc_123-xyz/pay",
      "http://api.example.com/merchant/orders/Abc_123-xyz/pay",
      "/merchant/orders/Abc_123-xyz/pay",
      "ftp://api.example.com/merchant/orders/Abc_123-xyz/pay",
      "not a url",
      ""
    ]) {
      expect(checkResource(naming(url), payUrl), url).toEqual(Either.left(Reason.resourceMismatch))
    }
  })

  it("refuses a payment that names no resource, and never throws", () => {
    expect(checkResource({} as PaymentPayload, payUrl)).toEqual(Either.left(Reason.resourceMissing))
    FastCheck.assert(
      FastCheck.property(FastCheck.string(), (url) => {
        expect(typeof paysResource(naming(url), payUrl)).toBe("boolean")
      })
    )
  })
})
