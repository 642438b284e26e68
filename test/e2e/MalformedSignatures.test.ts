/**
 * Every signature parse is total (issue 25): whatever bytes stand where a signature is expected —
 * on the pay path, at sign-in and on the webhooks — the answer is a coded 4xx, never a 500, and no
 * error-level line is logged. Random 65-byte and random-length signatures (properties), and the
 * audit's cases: a bad `v`, `r`/`s` out of range, all zeros, 64 and 66 bytes. On the real devnet,
 * where the token itself judges a payment's signature.
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, FastCheck, Layer, Logger, LogLevel, Runtime } from "effect"
import type { Hex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { encodeHeader } from "../../src/merchant/X402.js"
import { type RawResponse, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
/** Funded on the devnet, so that its payments reach the signature check. */
const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[4]!)
const RUNS = 40

/** Every line logged at Error or above. */
const errors: Array<string> = []
const CaptureErrors = Logger.add(
  Logger.make(({ logLevel, message }) => {
    if (LogLevel.greaterThanEqual(logLevel, LogLevel.Error)) errors.push(String(message))
  })
)

const hex = (bytes: Uint8Array | Buffer): Hex => `0x${Buffer.from(bytes).toString("hex")}`

/** secp256k1's group order: an `r` or `s` at or above it is out of range. */
const CURVE_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n
const word = (value: bigint) => value.toString(16).padStart(64, "0")

/** The audit's malformed signatures, each built from a real one where that matters. */
const malformed = (valid: Hex): ReadonlyArray<readonly [string, Hex]> => {
  const r = valid.slice(2, 66)
  const s = valid.slice(66, 130)
  return [
    ["bad v (0x1f)", `0x${r}${s}1f`],
    ["bad v (0xff)", `0x${r}${s}ff`],
    ["r = 0xff…ff", `0x${"ff".repeat(32)}${s}1b`],
    ["s = 0xff…ff", `0x${r}${"ff".repeat(32)}1b`],
    ["r = curve order", `0x${word(CURVE_ORDER)}${s}1c`],
    ["s = curve order + 1", `0x${r}${word(CURVE_ORDER + 1n)}1b`],
    ["all zeros (65 bytes)", `0x${"00".repeat(65)}`],
    ["64 bytes", `0x${valid.slice(2, 130)}`],
    ["66 bytes", `${valid}00`],
    ["1 byte", "0x1b"]
  ]
}

const random65 = FastCheck.uint8Array({ minLength: 65, maxLength: 65 }).map(hex)
const randomLength = FastCheck.uint8Array({ minLength: 1, maxLength: 300 }).map(hex)

/** A coded 4xx: the error contract, whatever the input. */
const expectCoded4xx = (response: RawResponse, what: string) => {
  expect(response.status, `${what}: ${JSON.stringify(response.body)}`).toBeGreaterThanOrEqual(400)
  expect(response.status, what).toBeLessThan(500)
  expect(typeof response.body?.code, what).toBe("string")
}

/** Runs a property whose check is an effect of the test server, shrinking on failure. */
const property = <A, R>(arbitrary: FastCheck.Arbitrary<A>, check: (value: A) => Effect.Effect<void, never, R>) =>
  Effect.flatMap(Effect.runtime<R>(), (runtime) =>
    Effect.promise(() =>
      FastCheck.assert(
        FastCheck.asyncProperty(arbitrary, (value) => Runtime.runPromise(runtime)(check(value))),
        { numRuns: RUNS }
      )
    )
  )

layer(testServer({ MERCHANT_PAY_TO: merchant.address }).pipe(Layer.provide(CaptureErrors)), {
  excludeTestServices: true
})("malformed signatures", (it) => {
  const openOrder = Effect.gen(function* () {
    const created = yield* send("POST", "/merchant/orders", { json: { amount: "1.5", description: "sig" } })
    const offer = yield* send("GET", `/merchant/orders/${created.body.id}/pay`)
    return { id: created.body.id as string, offer: offer.body as Offer }
  })

  /** A well-formed payment of `order` whose signature is replaced by `signature`. */
  const payWith = (order: { id: string; offer: Offer }, signature: Hex) =>
    Effect.gen(function* () {
      const { payload } = yield* Effect.promise(() => signPayment(payer, order.offer))
      const header = encodeHeader({ ...payload, payload: { ...payload.payload, signature } })
      return yield* send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })
    })

  const expectRefusedSignature = (response: RawResponse, what: string) => {
    expectCoded4xx(response, what)
    expect(response.status, what).toBe(402)
    expect(response.body, what).toMatchObject({ code: "PAYMENT_INVALID", error: "invalid_exact_evm_signature" })
  }

  /** A fresh challenge for `address`, and its verification with `signature`. */
  const signInWith = (signature: Hex, signer = privateKeyToAccount(generatePrivateKey())) =>
    Effect.gen(function* () {
      const challenge = yield* send("POST", "/auth/challenge", { json: { address: signer.address } })
      return yield* send("POST", "/auth/verify", { json: { message: challenge.body.message, signature } })
    })

  it.effect("the pay path: the audit's cases are 402 invalid_exact_evm_signature, the order stays open", () =>
    Effect.gen(function* () {
      const order = yield* openOrder
      const valid = (yield* Effect.promise(() => signPayment(payer, order.offer))).payload.payload.signature
      for (const [what, signature] of malformed(valid as Hex)) {
        expectRefusedSignature(yield* payWith(order, signature), what)
      }
      expect((yield* send("GET", `/merchant/orders/${order.id}`)).body.status).toBe("open")
      expect(errors).toEqual([])
    })
  )

  it.effect("the pay path: random 65-byte and random-length signatures are 402, never 5xx", () =>
    Effect.gen(function* () {
      const order = yield* openOrder
      yield* property(random65, (signature) =>
        Effect.map(payWith(order, signature), (response) => expectRefusedSignature(response, signature))
      )
      yield* property(randomLength, (signature) =>
        Effect.map(payWith(order, signature), (response) => expectRefusedSignature(response, signature))
      )
      expect(errors).toEqual([])
    })
  )

  it.effect("sign-in: the audit's cases and random signatures are 401 with a code, never 5xx", () =>
    Effect.gen(function* () {
      const account = privateKeyToAccount(generatePrivateKey())
      const challenge = yield* send("POST", "/auth/challenge", { json: { address: account.address } })
      const valid = yield* Effect.promise(() => account.signMessage({ message: challenge.body.message }))
      for (const [what, signature] of malformed(valid)) {
        const response = yield* signInWith(signature, account)
        expectCoded4xx(response, what)
        expect(response.body.code, what).toBe("INVALID_SIGNATURE")
      }
      for (const arbitrary of [random65, randomLength]) {
        yield* property(arbitrary, (signature) =>
          Effect.map(signInWith(signature), (response) => {
            expectCoded4xx(response, signature)
            expect(response.body.code, signature).toBe("INVALID_SIGNATURE")
          })
        )
      }
      expect(errors).toEqual([])
    })
  )

  it.effect("webhooks: any signature header value is a coded 4xx", () =>
    Effect.gen(function* () {
      const printable = FastCheck.string({ minLength: 0, maxLength: 200, unit: "grapheme-ascii" })
      yield* property(FastCheck.tuple(printable, printable), ([signature, timestamp]) =>
        Effect.map(
          send("POST", "/kyc/webhook/sandbox", {
            json: { id: hex(randomBytes(8)), sessionId: "s", status: "approved" },
            headers: { "x-sandbox-signature": signature, "x-sandbox-timestamp": timestamp }
          }),
          (response) => expectCoded4xx(response, JSON.stringify([signature, timestamp]))
        )
      )
      expect(errors).toEqual([])
    })
  )
})
