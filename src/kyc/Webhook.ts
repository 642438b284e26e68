/**
 * Webhook authentication: pure HMAC-SHA256 signatures over the raw request bytes and timestamp
 * freshness, for each provider's scheme. No I/O; times are passed in.
 *
 * Sandbox scheme (this service's own sandbox provider):
 *   `x-sandbox-timestamp: <unix seconds>`
 *   `x-sandbox-signature: v1=<hex HMAC-SHA256(secret, "<timestamp>." + raw body)>`
 *   The timestamp is inside the MAC, so it cannot be refreshed by a replayer.
 *
 * Didit scheme (documented by Didit for its `X-Signature` header):
 *   `x-signature: <hex HMAC-SHA256(webhook secret, raw body)>`
 *   `x-timestamp: <unix seconds>`, accepted within 5 minutes of now. The body's own `timestamp`
 *   field, which the MAC covers, is checked against the same window when present.
 *
 * Signatures are compared in constant time. A bad or missing signature is `BadSignature`; a valid
 * signature outside the window is `Stale`.
 */
import { createHash, createHmac, timingSafeEqual } from "node:crypto"
import { WEBHOOK_TOLERANCE_MS } from "./KycConfig.js"

export type Verdict = "valid" | "bad-signature" | "stale"

export type HeaderBag = Readonly<Record<string, string | undefined>>

const toBytes = (data: Uint8Array | string): Buffer =>
  typeof data === "string" ? Buffer.from(data, "utf8") : Buffer.from(data.buffer, data.byteOffset, data.byteLength)

export const hmacSha256Hex = (secret: string, ...parts: ReadonlyArray<Uint8Array | string>): string => {
  const mac = createHmac("sha256", Buffer.from(secret, "utf8"))
  for (const part of parts) mac.update(toBytes(part))
  return mac.digest("hex")
}

/** Constant-time equality of two lower-case hex digests (length mismatch is simply false). */
export const hexDigestEquals = (expected: string, given: string): boolean => {
  if (!/^[0-9a-f]{64}$/.test(expected) || !/^[0-9a-fA-F]{64}$/.test(given)) return false
  return timingSafeEqual(Buffer.from(expected, "hex"), Buffer.from(given.toLowerCase(), "hex"))
}

/** Unix seconds, strictly digits. */
const parseUnixSeconds = (text: string | undefined): number | undefined =>
  text !== undefined && /^\d{1,12}$/.test(text.trim()) ? Number(text.trim()) * 1000 : undefined

/** A digest that identifies a raw body, for providers that send no event id. */
export const bodyDigest = (body: Uint8Array): string => createHash("sha256").update(toBytes(body)).digest("hex")

const isFresh = (atMs: number, nowMs: number, toleranceMs = WEBHOOK_TOLERANCE_MS): boolean =>
  Math.abs(nowMs - atMs) <= toleranceMs

// ---------------------------------------------------------------------------------------------
// Sandbox

const SANDBOX_TIMESTAMP_HEADER = "x-sandbox-timestamp"
const SANDBOX_SIGNATURE_HEADER = "x-sandbox-signature"

export const signSandbox = (
  secret: string,
  body: Uint8Array | string,
  nowMs: number
): { readonly [SANDBOX_TIMESTAMP_HEADER]: string; readonly [SANDBOX_SIGNATURE_HEADER]: string } => {
  const timestamp = String(Math.floor(nowMs / 1000))
  return {
    [SANDBOX_TIMESTAMP_HEADER]: timestamp,
    [SANDBOX_SIGNATURE_HEADER]: `v1=${hmacSha256Hex(secret, `${timestamp}.`, body)}`
  }
}

export const verifySandbox = (input: {
  readonly secret: string
  readonly body: Uint8Array
  readonly headers: HeaderBag
  readonly nowMs: number
}): Verdict => {
  const timestamp = input.headers[SANDBOX_TIMESTAMP_HEADER]?.trim()
  const signature = input.headers[SANDBOX_SIGNATURE_HEADER]?.trim()
  const at = parseUnixSeconds(timestamp)
  if (timestamp === undefined || signature === undefined || at === undefined) return "bad-signature"
  const expected = hmacSha256Hex(input.secret, `${timestamp}.`, input.body)
  // During a secret rotation a sender may list several `v1=` values separated by commas or spaces.
  const candidates = signature
    .split(/[\s,]+/)
    .filter((part) => part.startsWith("v1="))
    .map((part) => part.slice(3))
  if (!candidates.some((candidate) => hexDigestEquals(expected, candidate))) return "bad-signature"
  return isFresh(at, input.nowMs) ? "valid" : "stale"
}

// ---------------------------------------------------------------------------------------------
// Didit

const DIDIT_SIGNATURE_HEADER = "x-signature"
const DIDIT_TIMESTAMP_HEADER = "x-timestamp"

export const signDidit = (
  secret: string,
  body: Uint8Array | string,
  nowMs: number
): { readonly [DIDIT_SIGNATURE_HEADER]: string; readonly [DIDIT_TIMESTAMP_HEADER]: string } => ({
  [DIDIT_SIGNATURE_HEADER]: hmacSha256Hex(secret, body),
  [DIDIT_TIMESTAMP_HEADER]: String(Math.floor(nowMs / 1000))
})

export const verifyDidit = (input: {
  readonly secret: string
  readonly body: Uint8Array
  readonly headers: HeaderBag
  readonly nowMs: number
  /** The body's own `timestamp` (in ms), when it has one; it is covered by the MAC. */
  readonly bodyTimestampMs?: number | undefined
}): Verdict => {
  const signature = input.headers[DIDIT_SIGNATURE_HEADER]?.trim()
  const at = parseUnixSeconds(input.headers[DIDIT_TIMESTAMP_HEADER])
  if (signature === undefined || at === undefined) return "bad-signature"
  if (!hexDigestEquals(hmacSha256Hex(input.secret, input.body), signature)) return "bad-signature"
  if (!isFresh(at, input.nowMs)) return "stale"
  if (input.bodyTimestampMs !== undefined && !isFresh(input.bodyTimestampMs, input.nowMs)) return "stale"
  return "valid"
}
