import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck } from "effect"
import {
  bytesToHex,
  concat,
  type Hex,
  hashMessage,
  numberToHex,
  recoverAddress,
  recoverMessageAddress,
  serializeSignature
} from "viem"
import { privateKeyToAccount, sign } from "viem/accounts"
import { curveEngine, recoverMessageSigner, recoverSigner, signingAccount } from "../../src/chain/Secp256k1.js"

const CURVE_ORDER = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n

const bytes32 = FastCheck.uint8Array({ minLength: 32, maxLength: 32 }).map((bytes) => bytesToHex(bytes))
/** A valid private key: 32 bytes below the curve's order, not zero. */
const privateKey = FastCheck.bigInt({ min: 1n, max: CURVE_ORDER - 1n }).map((key) => numberToHex(key, { size: 32 }))

/** What viem answers, as a settled value: the address, or that it refused. */
const viemAnswer = (hash: Hex, signature: Hex) =>
  recoverAddress({ hash, signature }).then(
    (address) => address,
    () => "refused"
  )
const ownAnswer = (hash: Hex, signature: Hex) =>
  recoverSigner(hash, signature).then(
    (address) => address,
    () => "refused"
  )

describe("recovering a signer", () => {
  it("uses libsecp256k1 on this platform (the prebuilt binding loads)", () => {
    expect(curveEngine).toBe("libsecp256k1")
  })

  it.effect.prop(
    "a signature made by a key recovers that key's address, with v as a y parity or as 27/28",
    [privateKey, bytes32, FastCheck.boolean()],
    ([key, hash, legacyV]) =>
      Effect.promise(async () => {
        const signature = await sign({ hash, privateKey: key })
        const serialized = serializeSignature({
          r: signature.r,
          s: signature.s,
          ...(legacyV ? { v: signature.yParity === 1 ? 28n : 27n } : { yParity: signature.yParity === 1 ? 1 : 0 })
        })
        expect(await recoverSigner(hash, serialized)).toBe(privateKeyToAccount(key).address)
      })
  )

  it.effect.prop(
    "its high-s twin (n - s, the other parity) recovers the same address in both implementations",
    [privateKey, bytes32],
    ([key, hash]) =>
      Effect.promise(async () => {
        const signature = await sign({ hash, privateKey: key })
        const twin = serializeSignature({
          r: signature.r,
          s: numberToHex(CURVE_ORDER - BigInt(signature.s), { size: 32 }),
          yParity: signature.yParity === 0 ? 1 : 0
        })
        expect(await ownAnswer(hash, twin)).toBe(await viemAnswer(hash, twin))
      })
  )

  it.effect.prop(
    "any 65 bytes get viem's answer: the same address, or refused",
    [
      bytes32,
      FastCheck.uint8Array({ minLength: 64, maxLength: 64 }),
      FastCheck.constantFrom(0, 1, 2, 26, 27, 28, 29, 255)
    ],
    ([hash, rs, v]) =>
      Effect.promise(async () => {
        const signature = concat([bytesToHex(rs), numberToHex(v, { size: 1 })])
        expect(await ownAnswer(hash, signature)).toBe(await viemAnswer(hash, signature))
      })
  )

  it("r or s of zero, or at the curve's order, is refused as viem refuses it", async () => {
    const hash = hashMessage("edge")
    const word = (value: bigint) => numberToHex(value, { size: 32 })
    for (const [r, s] of [
      [0n, 1n],
      [1n, 0n],
      [CURVE_ORDER, 1n],
      [1n, CURVE_ORDER]
    ] as const) {
      const signature = concat([word(r), word(s), "0x1b"])
      expect(await ownAnswer(hash, signature)).toBe("refused")
      expect(await viemAnswer(hash, signature)).toBe("refused")
    }
  })

  it("a personal message's signer (EIP-191) is the one viem recovers", async () => {
    const account = privateKeyToAccount(numberToHex(7n, { size: 32 }))
    const message = "Sign in to the card app.\nNonce: abc"
    const signature = await account.signMessage({ message })
    expect(await recoverMessageSigner(message, signature)).toBe(account.address)
    expect(await recoverMessageSigner(`${message}!`, signature)).not.toBe(account.address)
    expect(await recoverMessageSigner(`${message}!`, signature)).toBe(
      await recoverMessageAddress({ message: `${message}!`, signature })
    )
  })

  it("a signature of another length is refused, as viem refuses it", async () => {
    const hash = hashMessage("short")
    await expect(recoverSigner(hash, "0x1234")).rejects.toThrow()
    await expect(recoverAddress({ hash, signature: "0x1234" })).rejects.toThrow()
  })
})

const address = FastCheck.uint8Array({ minLength: 20, maxLength: 20 }).map((bytes) => bytesToHex(bytes))

describe("signing a transaction", () => {
  it.effect.prop(
    "libsecp256k1 signs every transaction as viem does, byte for byte (RFC 6979, low s)",
    [
      privateKey,
      address,
      FastCheck.nat({ max: 2 ** 20 }),
      FastCheck.bigInt({ min: 21_000n, max: 10_000_000n }),
      FastCheck.bigInt({ min: 1n, max: 10n ** 12n }),
      FastCheck.uint8Array({ maxLength: 100 }).map((bytes) => bytesToHex(bytes)),
      FastCheck.boolean()
    ],
    ([key, to, nonce, gas, fee, data, legacy]) =>
      Effect.promise(async () => {
        const transaction = legacy
          ? { chainId: 31337, nonce, gas, to, data, gasPrice: fee }
          : { chainId: 8453, nonce, gas, to, data, maxFeePerGas: fee * 2n, maxPriorityFeePerGas: fee }
        const native = await signingAccount(key).signTransaction(transaction)
        expect(native).toBe(await privateKeyToAccount(key).signTransaction(transaction))
      })
  )

  it.effect.prop(
    "a personal message is signed as viem signs it, and recovers to the key's address",
    [privateKey, FastCheck.string({ maxLength: 200 })],
    ([key, message]) =>
      Effect.promise(async () => {
        const signature = await signingAccount(key).signMessage({ message })
        expect(signature).toBe(await privateKeyToAccount(key).signMessage({ message }))
        expect(await recoverMessageSigner(message, signature)).toBe(privateKeyToAccount(key).address)
      })
  )
})
