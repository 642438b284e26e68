/**
 * Who signed: the secp256k1 public-key recovery of an Ethereum signature (65 bytes: r, s, v), which
 * every sign-in and every payment's check does once. libsecp256k1 (the `secp256k1` package's prebuilt
 * native binding) recovers a key in ~0.12 ms of CPU where viem's JavaScript curve takes ~1.9 ms and
 * leaves BigInt garbage behind; where that binding does not load on a platform, viem does it. The two
 * answer alike for every signature, valid or not (test/chain/Recover.test.ts); a signature neither
 * can recover is a rejected promise, as viem's.
 */
import { createRequire } from "node:module"
import { type Address, bytesToHex, type Hex, hashMessage, hexToBytes, recoverAddress } from "viem"
import { publicKeyToAddress } from "viem/accounts"

interface NativeSecp256k1 {
  readonly ecdsaRecover: (
    signature: Uint8Array,
    recoveryId: number,
    hash: Uint8Array,
    compressed: boolean
  ) => Uint8Array
}

// `secp256k1/bindings` is the native binding alone: it throws where no binary loads, rather than
// falling back silently to the package's JavaScript curve (`elliptic`).
const native = ((): NativeSecp256k1 | undefined => {
  try {
    return createRequire(import.meta.url)("secp256k1/bindings") as NativeSecp256k1
  } catch {
    return undefined
  }
})()

/** Which implementation recovers signers in this process. */
export const recoveryEngine: "libsecp256k1" | "viem" = native === undefined ? "viem" : "libsecp256k1"

const SIGNATURE = /^0x[0-9a-fA-F]{130}$/

/** viem's reading of the signature's last byte: a y parity, or a legacy `v`. */
const recoveryIdOf = (v: number) => (v === 0 || v === 1 ? v : v === 27 || v === 28 ? v - 27 : undefined)

/** The address whose key signed `hash` (32 bytes). */
export const recoverSigner = (hash: Hex, signature: Hex): Promise<Address> => {
  if (native === undefined || !SIGNATURE.test(signature)) return recoverAddress({ hash, signature })
  const bytes = hexToBytes(signature)
  const recoveryId = recoveryIdOf(bytes[64]!)
  if (recoveryId === undefined) return recoverAddress({ hash, signature })
  try {
    const publicKey = native.ecdsaRecover(bytes.subarray(0, 64), recoveryId, hexToBytes(hash), false)
    return Promise.resolve(publicKeyToAddress(bytesToHex(publicKey)))
  } catch (error) {
    return Promise.reject(error)
  }
}

/** The address whose key signed `message` as an EIP-191 personal message. */
export const recoverMessageSigner = (message: string, signature: Hex): Promise<Address> =>
  recoverSigner(hashMessage(message), signature)
