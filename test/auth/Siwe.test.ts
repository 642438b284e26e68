import { describe, expect, it } from "@effect/vitest"
import { ParsedMessage } from "@spruceid/siwe-parser"
import { FastCheck } from "effect"
import { getAddress } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { buildChallenge, CHALLENGE_TTL_MS, challengeOf, signedByKey } from "../../src/auth/Siwe.js"

const address = FastCheck.uint8Array({ minLength: 20, maxLength: 20 }).map((bytes) =>
  getAddress(`0x${Buffer.from(bytes).toString("hex")}`)
)
const nonce = FastCheck.uint8Array({ minLength: 16, maxLength: 32 }).map((bytes) => Buffer.from(bytes).toString("hex"))
const site = FastCheck.record({
  appUrl: FastCheck.constantFrom("https://app.example.com", "http://localhost:3000", "https://cards.example.org:8443"),
  chainId: FastCheck.integer({ min: 1, max: 2 ** 31 })
})
const instant = FastCheck.integer({ min: Date.parse("2000-01-01"), max: Date.parse("2100-01-01") })

describe("SIWE challenges", () => {
  it.prop(
    "every challenge is a valid EIP-4361 message for the site, and its nonce and address are found again",
    [site, address, nonce, instant],
    ([s, a, n, now]) => {
      const challenge = buildChallenge(s, a, n, now)
      const parsed = new ParsedMessage(challenge.message)
      const url = new URL(s.appUrl)
      expect(parsed.domain).toBe(url.host)
      expect(parsed.scheme).toBe(url.protocol === "https:" ? undefined : url.protocol.slice(0, -1))
      expect(parsed.uri).toBe(s.appUrl)
      expect(parsed.chainId).toBe(s.chainId)
      expect(parsed.address).toBe(a)
      expect(parsed.nonce).toBe(n)
      expect(Date.parse(parsed.issuedAt)).toBe(now)
      expect(Date.parse(parsed.expirationTime!)).toBe(now + CHALLENGE_TTL_MS)
      expect(challenge.expiresAt - challenge.issuedAt).toBe(CHALLENGE_TTL_MS)
      expect(challengeOf(challenge.message)).toEqual({ nonce: n, address: a })
    }
  )

  it("has no nonce for text that is not a SIWE message or whose nonce is short", () => {
    expect(challengeOf("hello")).toBeUndefined()
    const short = buildChallenge(
      { appUrl: "https://app.example.com", chainId: 1 },
      getAddress(`0x${"ab".repeat(20)}`),
      "abcd1234",
      0
    )
    expect(challengeOf(short.message)).toBeUndefined()
  })

  it("accepts the key's own signature only: another key's, a changed message or garbage is refused", async () => {
    const key = privateKeyToAccount(generatePrivateKey())
    const { message } = buildChallenge(
      { appUrl: "https://app.example.com", chainId: 1 },
      key.address,
      "a".repeat(16),
      0
    )
    const signature = await key.signMessage({ message })
    expect(await signedByKey(key.address, message, signature)).toBe(true)
    expect(await signedByKey(key.address.toLowerCase() as `0x${string}`, message, signature)).toBe(true)
    expect(await signedByKey(key.address, `${message} `, signature)).toBe(false)
    const other = privateKeyToAccount(generatePrivateKey())
    expect(await signedByKey(key.address, message, await other.signMessage({ message }))).toBe(false)
    expect(await signedByKey(key.address, message, "0x00")).toBe(false)
  })
})
