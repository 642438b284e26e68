/**
 * Order amounts: decimal USD strings as the client sends them. Pure, and bundled into the web app
 * (through the merchant's API schemas): nothing here may need Node.
 * At most 6 decimals, greater than 0, at most 1,000,000.
 */
import { Either } from "effect"
import { sha256, stringToBytes } from "viem"

const MAX_ORDER_USD = 1_000_000n
const MAX_DECIMALS = 6

export interface ParsedAmount {
  /** Canonical form: no leading zeros, no trailing fractional zeros ("001.50" -> "1.5"). */
  readonly normalized: string
  /** The amount in millionths of a dollar. */
  readonly micros: bigint
}

export const parseAmount = (text: string): Either.Either<ParsedAmount, string> => {
  // Leading zeros are fine (the value decides); the length cap keeps BigInt work trivial.
  const match = /^(\d{1,16})(?:\.(\d{1,6}))?$/.exec(text)
  if (match === null) {
    return Either.left('amount must be a decimal string with at most 6 decimals, like "12.50"')
  }
  const whole = BigInt(match[1]!)
  const fraction = (match[2] ?? "").padEnd(MAX_DECIMALS, "0")
  const micros = whole * 1_000_000n + BigInt(fraction)
  if (micros === 0n) return Either.left("amount must be greater than 0")
  if (micros > MAX_ORDER_USD * 1_000_000n) return Either.left("amount must be at most 1000000")
  const trimmed = fraction.replace(/0+$/, "")
  return Either.right({ normalized: trimmed === "" ? `${whole}` : `${whole}.${trimmed}`, micros })
}

/** Millionths of a dollar to the token's atomic units (USD1 has 18 decimals). */
export const microsToAtomic = (micros: bigint, decimals: number): bigint =>
  decimals >= 6 ? micros * 10n ** BigInt(decimals - 6) : micros / 10n ** BigInt(6 - decimals)

/**
 * What an order asks for below its amount's last micro-dollar, in the token's atomic units: a value
 * no other order asks for, so that the EIP-3009 authorization signed for this order (whose `value`
 * is the order's amount plus this) pays no other order, whatever the payload's unsigned parts say.
 * Derived from the order's id (128 random bits, chosen by us) with SHA-256: two orders of one amount
 * ask for the same value with a chance of one in 10^(decimals - 6), 10^12 for USD1's 18 decimals. A
 * token of 6 decimals or fewer has no room below a micro-dollar: 0.
 */
export const orderTag = (orderId: string, decimals: number): bigint =>
  decimals <= 6 ? 0n : BigInt(sha256(stringToBytes(orderId))) % 10n ** BigInt(decimals - 6)
