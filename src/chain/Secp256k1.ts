/**
 * The two secp256k1 operations the service does on every payment or sign-in: recovering who signed
 * (each sign-in's message, each payment's authorization) and signing the relayer's transactions.
 * libsecp256k1 (the `secp256k1` package's prebuilt native binding) recovers a key in ~0.12 ms of CPU
 * where viem's JavaScript curve takes ~1.9 ms and leaves BigInt garbage behind; where that binding
 * does not load on a platform, viem does both. The two answer alike for every signature, valid or
 * not, and sign byte for byte alike (test/chain/Secp256k1.test.ts).
 */
import { createRequire } from "node:module"
import {
  type Address,
  bytesToHex,
  type Hex,
  hashMessage,
  hexToBytes,
  keccak256,
  recoverAddress,
  type SerializeTransactionFn,
  serializeSignature,
  serializeTransaction,
  type TransactionSerializable
} from "viem"
import { type PrivateKeyAccount, privateKeyToAccount, publicKeyToAddress } from "viem/accounts"

interface NativeSecp256k1 {
  readonly ecdsaRecover: (
    signature: Uint8Array,
    recoveryId: number,
    hash: Uint8Array,
    compressed: boolean
  ) => Uint8Array
  readonly ecdsaSign: (hash: Uint8Array, privateKey: Uint8Array) => { signature: Uint8Array; recid: number }
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

/** Which implementation recovers signers and signs transactions in this process. */
export const curveEngine: "libsecp256k1" | "viem" = native === undefined ? "viem" : "libsecp256k1"

const SIGNATURE = /^0x[0-9a-fA-F]{130}$/

/** viem's reading of the signature's last byte: a y parity, or a legacy `v`. */
const recoveryIdOf = (v: number) => (v === 0 || v === 1 ? v : v === 27 || v === 28 ? v - 27 : undefined)

/** The address whose key signed `hash` (32 bytes); a signature that recovers no key is a rejected promise, as viem's. */
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

/**
 * The key's viem account, whose transactions and personal messages libsecp256k1 signs where it
 * loads (the relayer signs a transaction per payment, inside its key's queue). Both sign
 * deterministically (RFC 6979, no added entropy) with a low s, so the signature is the one viem
 * would have made, byte for byte.
 */
export const signingAccount = (privateKey: Hex): PrivateKeyAccount => {
  const account = privateKeyToAccount(privateKey)
  if (native === undefined) return account
  const key = hexToBytes(privateKey)
  const signatureOf = (hash: Hex) => {
    const { signature, recid } = native.ecdsaSign(hexToBytes(hash), key)
    const [r, s] = [bytesToHex(signature.subarray(0, 32)), bytesToHex(signature.subarray(32))]
    return { r, s, v: recid === 1 ? 28n : 27n, yParity: recid }
  }
  const signTransaction = async (
    transaction: TransactionSerializable,
    options?: { readonly serializer?: SerializeTransactionFn<TransactionSerializable> }
  ) => {
    const serializer = options?.serializer ?? serializeTransaction
    // as viem: a blob transaction is signed without its sidecars
    const signable = transaction.type === "eip4844" ? { ...transaction, sidecars: false as const } : transaction
    return serializer(transaction, signatureOf(keccak256(await serializer(signable))))
  }
  const signMessage: PrivateKeyAccount["signMessage"] = async ({ message }) =>
    serializeSignature(signatureOf(hashMessage(message)))
  return { ...account, signMessage, signTransaction: signTransaction as PrivateKeyAccount["signTransaction"] }
}
