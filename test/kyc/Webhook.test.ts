import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { WEBHOOK_TOLERANCE_MS } from "../../src/kyc/KycConfig.js"
import {
  bodyDigest,
  hexDigestEquals,
  hmacSha256Hex,
  signDidit,
  signSandbox,
  verifyDidit,
  verifySandbox
} from "../../src/kyc/Webhook.js"

const NOW = Date.parse("2026-11-21T12:00:00Z")
const bytes = (text: string) => new Uint8Array(Buffer.from(text, "utf8"))
const body = FastCheck.uint8Array({ minLength: 0, maxLength: 512 })
const secret = FastCheck.string({ minLength: 1, maxLength: 64 })

describe("sandbox webhook signatures", () => {
  it("signs HMAC-SHA256 over '<timestamp>.<raw body>'", () => {
    const headers = signSandbox("s3cret", '{"a":1}', NOW)
    expect(headers["x-sandbox-timestamp"]).toBe(String(NOW / 1000))
    expect(headers["x-sandbox-signature"]).toBe(`v1=${hmacSha256Hex("s3cret", `${NOW / 1000}.{"a":1}`)}`)
  })

  it.prop(
    "a signed delivery verifies within 5 minutes either way",
    [secret, body, FastCheck.integer({ min: -WEBHOOK_TOLERANCE_MS + 1000, max: WEBHOOK_TOLERANCE_MS - 1000 })],
    ([s, b, skew]) => {
      const headers = signSandbox(s, b, NOW)
      expect(verifySandbox({ secret: s, body: b, headers, nowMs: NOW + skew })).toBe("valid")
    }
  )

  it.prop(
    "outside the window it is stale",
    [
      secret,
      body,
      FastCheck.integer({ min: WEBHOOK_TOLERANCE_MS + 1000, max: 10 * WEBHOOK_TOLERANCE_MS }),
      FastCheck.boolean()
    ],
    ([s, b, skew, future]) => {
      const headers = signSandbox(s, b, NOW)
      expect(verifySandbox({ secret: s, body: b, headers, nowMs: NOW + (future ? -skew : skew) })).toBe("stale")
    }
  )

  it.prop(
    "any change to body, timestamp or secret is a bad signature",
    [secret, body.filter((b) => b.length > 0), FastCheck.nat(), FastCheck.integer({ min: 0, max: 7 })],
    ([s, b, at, bit]) => {
      const headers = signSandbox(s, b, NOW)
      const flipped = new Uint8Array(b)
      flipped[at % b.length] = flipped[at % b.length]! ^ (1 << bit)
      expect(verifySandbox({ secret: s, body: flipped, headers, nowMs: NOW })).toBe("bad-signature")
      expect(verifySandbox({ secret: `${s}x`, body: b, headers, nowMs: NOW })).toBe("bad-signature")
      const moved = { ...headers, "x-sandbox-timestamp": String(NOW / 1000 + 1) }
      expect(verifySandbox({ secret: s, body: b, headers: moved, nowMs: NOW })).toBe("bad-signature")
    }
  )

  it("missing or malformed headers are a bad signature; rotation lists are accepted", () => {
    const b = bytes("{}")
    const good = signSandbox("k", b, NOW)
    const v = (headers: Record<string, string | undefined>) =>
      verifySandbox({ secret: "k", body: b, headers, nowMs: NOW })
    expect(v({})).toBe("bad-signature")
    expect(v({ ...good, "x-sandbox-timestamp": undefined })).toBe("bad-signature")
    expect(v({ ...good, "x-sandbox-timestamp": "12.5" })).toBe("bad-signature")
    expect(v({ ...good, "x-sandbox-signature": good["x-sandbox-signature"].slice(3) })).toBe("bad-signature")
    expect(v({ ...good, "x-sandbox-signature": "v1=" })).toBe("bad-signature")
    expect(v({ ...good, "x-sandbox-signature": `v1=${"0".repeat(64)}, ${good["x-sandbox-signature"]}` })).toBe("valid")
  })
})

describe("Didit webhook signatures", () => {
  it("X-Signature is the hex HMAC-SHA256 of the raw body", () => {
    const raw = '{"session_id":"x","status":"Approved"}'
    const headers = signDidit("whsec", raw, NOW)
    expect(headers["x-signature"]).toBe(hmacSha256Hex("whsec", raw))
    expect(verifyDidit({ secret: "whsec", body: bytes(raw), headers, nowMs: NOW })).toBe("valid")
    // Upper-case hex is the same digest.
    expect(
      verifyDidit({
        secret: "whsec",
        body: bytes(raw),
        headers: { ...headers, "x-signature": headers["x-signature"].toUpperCase() },
        nowMs: NOW
      })
    ).toBe("valid")
    // Re-serialised JSON (same data, other bytes) does not verify: the raw bytes are what count.
    expect(
      verifyDidit({ secret: "whsec", body: bytes('{"session_id": "x", "status": "Approved"}'), headers, nowMs: NOW })
    ).toBe("bad-signature")
  })

  it("X-Timestamp and the body's signed timestamp must both be fresh", () => {
    const b = bytes("{}")
    expect(verifyDidit({ secret: "k", body: b, headers: signDidit("k", b, NOW - 6 * 60 * 1000), nowMs: NOW })).toBe(
      "stale"
    )
    expect(
      verifyDidit({
        secret: "k",
        body: b,
        headers: signDidit("k", b, NOW),
        nowMs: NOW,
        bodyTimestampMs: NOW - 3600_000
      })
    ).toBe("stale")
    expect(
      verifyDidit({ secret: "k", body: b, headers: signDidit("k", b, NOW), nowMs: NOW, bodyTimestampMs: NOW - 60_000 })
    ).toBe("valid")
    expect(verifyDidit({ secret: "k", body: b, headers: { "x-signature": hmacSha256Hex("k", b) }, nowMs: NOW })).toBe(
      "bad-signature"
    )
  })

  it.prop("other secrets or bodies never verify", [secret, body, body], ([s, b, other]) => {
    FastCheck.pre(Buffer.compare(Buffer.from(b), Buffer.from(other)) !== 0)
    const headers = signDidit(s, b, NOW)
    expect(verifyDidit({ secret: s, body: other, headers, nowMs: NOW })).toBe("bad-signature")
    expect(verifyDidit({ secret: `${s}!`, body: b, headers, nowMs: NOW })).toBe("bad-signature")
  })
})

describe("helpers", () => {
  it("digest comparison is strict about shape", () => {
    const d = hmacSha256Hex("k", "x")
    expect(hexDigestEquals(d, d)).toBe(true)
    expect(hexDigestEquals(d, `${d}00`)).toBe(false)
    expect(hexDigestEquals(d, d.slice(0, 62))).toBe(false)
    expect(hexDigestEquals(d, "")).toBe(false)
    expect(bodyDigest(bytes("a"))).toBe(bodyDigest(bytes("a")))
    expect(bodyDigest(bytes("a"))).not.toBe(bodyDigest(bytes("b")))
  })
})
