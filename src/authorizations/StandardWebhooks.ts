/**
 * The signature scheme Lithic signs its Auth Stream Access requests and Events API webhooks with:
 * Standard Webhooks (standardwebhooks.com; Lithic's SDK verifies with that library). Pure, no I/O.
 *
 * - The secret is `whsec_` + base64 of the HMAC key.
 * - `webhook-id` names the message (the same on a re-delivery), `webhook-timestamp` is Unix seconds,
 *   `webhook-signature` holds one or more space-separated `v1,<base64 HMAC-SHA256(key, id.timestamp.body)>`.
 * - A timestamp more than 5 minutes from now either way is refused: a replayed message is stale.
 *
 * Signatures are compared in constant time; the body is the raw bytes received, never re-serialised.
 */
import { createHmac, timingSafeEqual } from "node:crypto"

export const SIGNATURE_TOLERANCE_MS = 5 * 60 * 1000

export type HeaderBag = Readonly<Record<string, string | undefined>>

export type Verdict =
  | { readonly valid: true; readonly messageId: string }
  | { readonly valid: false; readonly why: "missing" | "bad-signature" | "stale" }

const SECRET_PREFIX = "whsec_"

/** The HMAC key of a `whsec_` secret; none when it is not one. */
export const secretKey = (secret: string): Buffer | undefined => {
  if (!secret.startsWith(SECRET_PREFIX)) return undefined
  const encoded = secret.slice(SECRET_PREFIX.length)
  if (!/^[A-Za-z0-9+/]+={0,2}$/.test(encoded)) return undefined
  const key = Buffer.from(encoded, "base64")
  return key.length >= 16 ? key : undefined
}

/** A fresh secret in the scheme's format (24 random bytes, as Standard Webhooks' own generators make). */
export const formatSecret = (key: Uint8Array): string => `${SECRET_PREFIX}${Buffer.from(key).toString("base64")}`

const mac = (key: Buffer, messageId: string, timestamp: string, body: Uint8Array | string): Buffer =>
  createHmac("sha256", key)
    .update(`${messageId}.${timestamp}.`, "utf8")
    .update(typeof body === "string" ? Buffer.from(body, "utf8") : body)
    .digest()

/** The three headers of a message signed with `key` at `nowMs`. */
export const sign = (
  key: Buffer,
  messageId: string,
  body: Uint8Array | string,
  nowMs: number
): { readonly "webhook-id": string; readonly "webhook-timestamp": string; readonly "webhook-signature": string } => {
  const timestamp = String(Math.floor(nowMs / 1000))
  return {
    "webhook-id": messageId,
    "webhook-timestamp": timestamp,
    "webhook-signature": `v1,${mac(key, messageId, timestamp, body).toString("base64")}`
  }
}

export const verify = (input: {
  readonly key: Buffer
  readonly body: Uint8Array
  readonly headers: HeaderBag
  readonly nowMs: number
}): Verdict => {
  const messageId = input.headers["webhook-id"]?.trim()
  const timestamp = input.headers["webhook-timestamp"]?.trim()
  const signatures = input.headers["webhook-signature"]?.trim()
  if (!messageId || !timestamp || !signatures || messageId.length > 200 || !/^\d{1,12}$/.test(timestamp)) {
    return { valid: false, why: "missing" }
  }
  const expected = mac(input.key, messageId, timestamp, input.body)
  const matches = signatures.split(" ").some((item) => {
    const [version, encoded] = item.split(",", 2)
    if (version !== "v1" || encoded === undefined) return false
    const given = Buffer.from(encoded, "base64")
    return given.length === expected.length && timingSafeEqual(given, expected)
  })
  if (!matches) return { valid: false, why: "bad-signature" }
  if (Math.abs(input.nowMs - Number(timestamp) * 1000) > SIGNATURE_TOLERANCE_MS) return { valid: false, why: "stale" }
  return { valid: true, messageId }
}
