import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck, Redacted } from "effect"
import { CardIssuer, expiryAfter, LocalCardIssuer, localCardNumber } from "../../src/cards/CardIssuer.js"
import { isLuhnValid } from "../../src/cards/Luhn.js"

describe("local card issuer", () => {
  it("numbers are 16 Luhn-valid digits in the non-network 9406 range, and differ", () => {
    const numbers = Array.from({ length: 500 }, () => localCardNumber())
    for (const number of numbers) {
      expect(number).toMatch(/^9406\d{12}$/)
      expect(isLuhnValid(number)).toBe(true)
    }
    expect(new Set(numbers).size).toBe(numbers.length)
  })

  it("expiry is MM/YY three years ahead, in UTC", () => {
    expect(expiryAfter(Date.parse("2026-11-21T12:00:00Z"))).toBe("11/29")
    expect(expiryAfter(Date.parse("2026-01-01T00:00:00Z"))).toBe("01/29")
    expect(expiryAfter(Date.parse("2026-12-31T23:59:59Z"))).toBe("12/29")
    expect(expiryAfter(Date.parse("2098-06-15T00:00:00Z"))).toBe("06/01")
  })

  it.prop("expiry always matches MM/YY", [FastCheck.integer({ min: 0, max: 4_000_000_000_000 })], ([now]) => {
    expect(expiryAfter(now)).toMatch(/^(0[1-9]|1[0-2])\/\d{2}$/)
  })

  it.effect("the Layer issues a full card face", () =>
    Effect.gen(function* () {
      const issuer = yield* CardIssuer
      const now = Date.parse("2026-11-21T12:00:00Z")
      const card = yield* issuer.issue({ address: "0x0000000000000000000000000000000000000001", holder: "A B", now })
      expect(Redacted.value(card.number)).toMatch(/^9406\d{12}$/)
      expect(Redacted.value(card.cvv)).toMatch(/^\d{3}$/)
      expect(card.expiry).toBe("11/29")
      // The sandbox network names the card by it, as a processor's token: a UUID.
      expect(card.issuerRef).toMatch(/^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/)
      // Redacted values do not print.
      expect(String(card.number)).not.toContain("9406")
    }).pipe(Effect.provide(LocalCardIssuer))
  )
})
