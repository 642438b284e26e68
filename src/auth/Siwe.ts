/**
 * EIP-4361 (Sign-In with Ethereum) challenge text and its EOA signature: pure, no I/O.
 * The server stores every message it issues and later accepts only that exact text back,
 * so parsing here is only used to find the nonce and signer of a message a client returns.
 */
import { type Hex, isAddressEqual } from "viem"
import { createSiweMessage, parseSiweMessage } from "viem/siwe"
import type { Address } from "../chain/Address.js"
import { recoverMessageSigner } from "../chain/Secp256k1.js"

export const CHALLENGE_TTL_MS = 10 * 60 * 1000
const STATEMENT = "Sign in to the card app."

export interface SiweSite {
  /** The app's public URL (`APP_URL`): its host is the SIWE domain, the URL itself the URI. */
  readonly appUrl: string
  readonly chainId: number
}

export interface Challenge {
  readonly address: Address
  readonly nonce: string
  readonly issuedAt: number
  readonly expiresAt: number
  readonly message: string
}

export const buildChallenge = (site: SiweSite, address: Address, nonce: string, now: number): Challenge => {
  const url = new URL(site.appUrl)
  const expiresAt = now + CHALLENGE_TTL_MS
  const message = createSiweMessage({
    // https is the default scheme of a SIWE domain; say so explicitly only when it differs.
    ...(url.protocol === "https:" ? {} : { scheme: url.protocol.slice(0, -1) }),
    domain: url.host,
    address,
    statement: STATEMENT,
    uri: site.appUrl,
    version: "1",
    chainId: site.chainId,
    nonce,
    issuedAt: new Date(now),
    expirationTime: new Date(expiresAt)
  })
  return { address, nonce, issuedAt: now, expiresAt, message }
}

/** The nonce and address of a SIWE message, or undefined when the text is not one. */
export const challengeOf = (message: string): { readonly nonce: string; readonly address: Address } | undefined => {
  const { nonce, address } = parseSiweMessage(message)
  return nonce !== undefined && /^[A-Za-z0-9]{16,}$/.test(nonce) && address !== undefined
    ? { nonce, address }
    : undefined
}

/**
 * Whether `address`'s own key signed the message (EIP-191 recovery). False for a
 * contract wallet's signature, which only the chain can check (ERC-1271).
 */
export const signedByKey = (address: Address, message: string, signature: Hex): Promise<boolean> =>
  recoverMessageSigner(message, signature).then(
    (signer) => isAddressEqual(signer, address),
    () => false
  )
