import { createHash } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { ParsedMessage } from "@spruceid/siwe-parser"
import { Effect } from "effect"
import { getAddress } from "viem"
import type { PrivateKeyAccount } from "viem/accounts"
import { SESSION_TTL_MS } from "../../src/auth/Auth.js"
import { publicClientFor } from "../../src/chain/Devnet.js"
import { counterfactualSignature, createSmartAccount, smartAccountAddress } from "../../src/chain/DevnetOperator.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { newAccount, sessionCount, signIn } from "../support/auth.js"
import { bearer, send } from "../support/http.js"
import { TestDevnet } from "../support/TestChain.js"
import { TEST_APP_URL, testServer } from "../support/TestServer.js"

const challenge = (address: string) =>
  send("POST", "/auth/challenge", { json: { address } }).pipe(
    Effect.tap((response) => expect(response.status).toBe(200)),
    Effect.map((response) => response.body.message as string)
  )

const sign = (account: PrivateKeyAccount, message: string) => Effect.promise(() => account.signMessage({ message }))

layer(testServer(), { excludeTestServices: true })("sign-in over HTTP", (it) => {
  it.effect("challenge, sign, verify, read /me, sign out, and the token is dead", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const before = Date.now()
      // Addresses are accepted in lower case and answered checksummed.
      const message = yield* challenge(account.address.toLowerCase())
      const signature = yield* sign(account, message)
      const verified = yield* send("POST", "/auth/verify", { json: { message, signature } })
      expect(verified.status).toBe(200)
      expect(verified.body).toMatchObject({ address: account.address, kyc: "none", card: null })
      const token: string = verified.body.token
      expect(token).toMatch(/^[A-Za-z0-9_-]{43}$/)
      // Milliseconds since the epoch: 30 days after the sign-in.
      expect(verified.body.expiresAt).toBeGreaterThanOrEqual(before + SESSION_TTL_MS)
      expect(verified.body.expiresAt).toBeLessThanOrEqual(Date.now() + SESSION_TTL_MS)

      const me = yield* send("GET", "/me", { headers: bearer(token) })
      expect(me.status).toBe(200)
      expect(me.body).toMatchObject({ address: account.address, kyc: "none", card: null })
      // Milliseconds since the epoch, taken while the sign-in ran.
      expect(me.body.createdAt).toBeGreaterThanOrEqual(before)
      expect(me.body.createdAt).toBeLessThanOrEqual(Date.now())

      const signout = yield* send("POST", "/auth/signout", { headers: bearer(token) })
      expect(signout.status).toBe(204)
      expect(signout.body).toBeUndefined()

      const after = yield* send("GET", "/me", { headers: bearer(token) })
      expect(after.status).toBe(401)
      expect(after.body).toEqual({ error: expect.any(String), code: "UNAUTHORIZED" })
      expect(after.headers["www-authenticate"]).toMatch(/^Bearer/)
    })
  )

  it.effect("the challenge is an EIP-4361 message for the configured site, valid 10 minutes", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const parsed = new ParsedMessage(yield* challenge(account.address))
      expect(parsed.domain).toBe(new URL(TEST_APP_URL).host)
      expect(parsed.uri).toBe(TEST_APP_URL)
      expect(parsed.chainId).toBe(31337)
      expect(parsed.version).toBe("1")
      expect(parsed.address).toBe(account.address)
      expect(parsed.nonce).toMatch(/^[A-Za-z0-9]{16,}$/)
      expect(Date.parse(parsed.expirationTime!) - Date.parse(parsed.issuedAt)).toBe(10 * 60 * 1000)
      // Nonces never repeat.
      const again = new ParsedMessage(yield* challenge(account.address))
      expect(again.nonce).not.toBe(parsed.nonce)
    })
  )

  it.effect("a challenge is single use", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const message = yield* challenge(account.address)
      const signature = yield* sign(account, message)
      expect((yield* send("POST", "/auth/verify", { json: { message, signature } })).status).toBe(200)
      const before = yield* sessionCount
      const replay = yield* send("POST", "/auth/verify", { json: { message, signature } })
      expect(replay.status).toBe(401)
      expect(replay.body.code).toBe("CHALLENGE_UNKNOWN")
      expect(yield* sessionCount).toBe(before)
    })
  )

  it.effect("concurrent verifications of one challenge issue exactly one token", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const message = yield* challenge(account.address)
      const signature = yield* sign(account, message)
      const before = yield* sessionCount
      const results = yield* Effect.all(
        Array.from({ length: 8 }, () => send("POST", "/auth/verify", { json: { message, signature } })),
        { concurrency: "unbounded" }
      )
      expect(results.filter((r) => r.status === 200)).toHaveLength(1)
      expect(results.filter((r) => r.status === 401 && r.body.code === "CHALLENGE_UNKNOWN")).toHaveLength(7)
      expect(yield* sessionCount).toBe(before + 1)
    })
  )

  it.effect("a signature by another key is refused and does not burn the challenge", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const message = yield* challenge(account.address)
      const before = yield* sessionCount
      const forged = yield* send("POST", "/auth/verify", {
        json: { message, signature: yield* sign(newAccount(), message) }
      })
      expect(forged.status).toBe(401)
      expect(forged.body).toEqual({ error: expect.stringContaining(account.address), code: "INVALID_SIGNATURE" })
      expect(forged.body.token).toBeUndefined()
      expect(yield* sessionCount).toBe(before)
      const genuine = yield* send("POST", "/auth/verify", {
        json: { message, signature: yield* sign(account, message) }
      })
      expect(genuine.status).toBe(200)
    })
  )

  it.effect("a deployed smart account (ERC-1271) signs in with its owner's signature", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const owner = newAccount()
      const wallet = yield* createSmartAccount(devnet, { owner: owner.address, salt: 1n }).pipe(Effect.orDie)

      const message = yield* challenge(wallet)
      const before = yield* sessionCount
      const forged = yield* send("POST", "/auth/verify", {
        json: { message, signature: yield* sign(newAccount(), message) }
      })
      expect(forged.status).toBe(401)
      expect(forged.body.code).toBe("INVALID_SIGNATURE")
      expect(yield* sessionCount).toBe(before)
      const verified = yield* send("POST", "/auth/verify", {
        json: { message, signature: yield* sign(owner, message) }
      })
      expect(verified.status).toBe(200)
      expect(verified.body.address).toBe(getAddress(wallet))
    })
  )

  it.effect("a smart account not deployed yet signs in with an ERC-6492 signature, and stays undeployed", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const owner = newAccount()
      const account = { owner: owner.address, salt: 0n }
      const wallet = yield* smartAccountAddress(devnet, account).pipe(Effect.orDie)
      const codeOf = Effect.promise(() => publicClientFor(devnet).getCode({ address: wallet }))

      const message = yield* challenge(wallet)
      const before = yield* sessionCount
      for (const signature of [
        // another key's signature, wrapped for the right factory call
        counterfactualSignature(devnet, account, yield* sign(newAccount(), message)),
        // the owner's, wrapped with another owner's account: the deployed account is not `wallet`
        counterfactualSignature(devnet, { owner: newAccount().address, salt: 0n }, yield* sign(owner, message)),
        // the owner's bare signature: nothing at `wallet` can check it yet
        yield* sign(owner, message)
      ]) {
        const refused = yield* send("POST", "/auth/verify", { json: { message, signature } })
        expect(refused.status).toBe(401)
        expect(refused.body.code).toBe("INVALID_SIGNATURE")
      }
      expect(yield* sessionCount).toBe(before)

      const verified = yield* send("POST", "/auth/verify", {
        json: { message, signature: counterfactualSignature(devnet, account, yield* sign(owner, message)) }
      })
      expect(verified.status).toBe(200)
      expect(verified.body.address).toBe(getAddress(wallet))
      // checked in simulation: signing in deploys nothing
      expect(yield* codeOf).toBeUndefined()
    })
  )

  it.effect("an edited message is not a challenge we issued, even when signed by the right key", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const message = (yield* challenge(account.address)).replace("Chain ID: 31337", "Chain ID: 1")
      const response = yield* send("POST", "/auth/verify", {
        json: { message, signature: yield* sign(account, message) }
      })
      expect(response.status).toBe(401)
      expect(response.body.code).toBe("CHALLENGE_UNKNOWN")
      const made = yield* send("POST", "/auth/verify", {
        json: { message: "hello", signature: yield* sign(account, "hello") }
      })
      expect(made.status).toBe(401)
      expect(made.body.code).toBe("CHALLENGE_UNKNOWN")
    })
  )

  it.effect("malformed addresses and signatures are 400 BAD_REQUEST naming the field", () =>
    Effect.gen(function* () {
      for (const address of ["0x12", "not-an-address", "0x70997970C51812dc3A010C7d01b50e0d17dc79c8", 42]) {
        const response = yield* send("POST", "/auth/challenge", { json: { address } })
        expect(response.status).toBe(400)
        expect(response.body).toEqual({ error: expect.stringContaining("address"), code: "BAD_REQUEST" })
      }
      const account = newAccount()
      const message = yield* challenge(account.address)
      for (const signature of ["deadbeef", "0xzz", 7]) {
        const response = yield* send("POST", "/auth/verify", { json: { message, signature } })
        expect(response.status).toBe(400)
        expect(response.body).toEqual({ error: expect.stringContaining("signature"), code: "BAD_REQUEST" })
      }
      const missing = yield* send("POST", "/auth/verify", { json: { message } })
      expect(missing.status).toBe(400)
      expect(missing.body.error).toContain("signature")
      // Well-formed hex that is no signature at all.
      const short = yield* send("POST", "/auth/verify", { json: { message, signature: "0x1234" } })
      expect(short.status).toBe(401)
      expect(short.body.code).toBe("INVALID_SIGNATURE")
    })
  )

  it.effect("sessions hold only the SHA-256 of the token", () =>
    Effect.gen(function* () {
      const account = newAccount()
      const { token } = yield* signIn(account)
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{
        tokenHash: Uint8Array
        address: string
      }>`SELECT * FROM sessions WHERE address = ${account.address}`
      expect(rows).toHaveLength(1)
      expect(Buffer.from(rows[0]!.tokenHash).toString("hex")).toBe(createHash("sha256").update(token).digest("hex"))
      const dump = yield* sql<{ row: string }>`SELECT row_to_json(s)::text AS row FROM sessions s`
      for (const { row } of dump) expect(row).not.toContain(token)
    })
  )

  it.effect("bearer tokens that are missing, malformed or unknown are 401 with WWW-Authenticate", () =>
    Effect.gen(function* () {
      for (const headers of [
        {},
        { authorization: "Bearer " },
        { authorization: "Basic abc" },
        bearer("x".repeat(43))
      ]) {
        const response = yield* send("GET", "/me", { headers })
        expect(response.status).toBe(401)
        expect(response.body.code).toBe("UNAUTHORIZED")
        expect(response.headers["www-authenticate"]).toMatch(/^Bearer/)
      }
    })
  )
})

describe("error model", () => {
  layer(testServer({}, { chain: InMemoryChain.layer() }), { excludeTestServices: true })("wire", (it) => {
    it.effect("unknown routes are 404 NOT_FOUND", () =>
      Effect.gen(function* () {
        const response = yield* send("GET", "/no/such/path")
        expect(response.status).toBe(404)
        expect(response.body).toEqual({ error: "no route for GET /no/such/path", code: "NOT_FOUND" })
      })
    )

    it.effect("malformed JSON is 400 BAD_REQUEST", () =>
      Effect.gen(function* () {
        const response = yield* send("POST", "/auth/challenge", { text: '{"address": ' })
        expect(response.status).toBe(400)
        expect(response.body).toEqual({ error: "the request body is not valid JSON", code: "BAD_REQUEST" })
      })
    )

    it.effect("an oversized body is 413 PAYLOAD_TOO_LARGE", () =>
      Effect.gen(function* () {
        const response = yield* send("POST", "/auth/verify", {
          json: { message: "x".repeat(100_000), signature: "0x" }
        })
        expect(response.status).toBe(413)
        expect(response.body.code).toBe("PAYLOAD_TOO_LARGE")
      })
    )

    it.effect("every response carries a request id, echoing the caller's", () =>
      Effect.gen(function* () {
        const echoed = yield* send("GET", "/health", { headers: { "x-request-id": "abc-123" } })
        expect(echoed.headers["x-request-id"]).toBe("abc-123")
        const fresh = yield* send("GET", "/nope")
        expect(fresh.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/)
      })
    )

    it.effect("health and readiness", () =>
      Effect.gen(function* () {
        expect(yield* send("GET", "/health")).toMatchObject({ status: 200, body: { status: "ok" } })
        expect(yield* send("GET", "/ready")).toMatchObject({ status: 200, body: { status: "ready" } })
      })
    )
  })
})
