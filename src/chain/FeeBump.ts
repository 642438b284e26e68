/**
 * The fees of a transaction that replaces a stuck one with the same nonce. A node takes a
 * replacement only when it raises both EIP-1559 fee fields (or the gas price) by at least 12.5 %
 * (geth's and anvil's `price bump` rule); it must also be worth mining now, so it pays at least the
 * current estimate; and it never exceeds the operator's cap (MAX_FEE_PER_GAS).
 */
import { Option } from "effect"
import type { parseTransaction } from "viem"

/** Fee fields of a transaction to sign: EIP-1559, or a legacy gas price. */
export type Fees =
  | { readonly maxFeePerGas: bigint; readonly maxPriorityFeePerGas: bigint }
  | { readonly gasPrice: bigint }

/** The fees a signed transaction carries. */
export const feesOf = (tx: ReturnType<typeof parseTransaction>): Fees =>
  tx.type === "legacy" || tx.type === "eip2930"
    ? { gasPrice: tx.gasPrice ?? 0n }
    : { maxFeePerGas: tx.maxFeePerGas ?? 0n, maxPriorityFeePerGas: tx.maxPriorityFeePerGas ?? 0n }

/** The node's minimum raise of a replacement, as a fraction: 12.5 %. */
const BUMP_NUMERATOR = 1125n
const BUMP_DENOMINATOR = 1000n

/** `fee` raised by 12.5 %, rounded up (a node compares the exact product). */
export const minimumReplacementFee = (fee: bigint): bigint =>
  (fee * BUMP_NUMERATOR + BUMP_DENOMINATOR - 1n) / BUMP_DENOMINATOR

const max = (a: bigint, b: bigint) => (a > b ? a : b)
const min = (a: bigint, b: bigint) => (a < b ? a : b)

/**
 * Fees that replace `previous`: each field at least 12.5 % above it and at least `current`'s (the
 * estimate now), the tip never above the fee cap; capped by `cap`. None when the cap leaves no room
 * for the 12.5 % raise (the transaction can only wait), or when the two are not the same kind.
 */
export const bumpedFees = (previous: Fees, current: Fees, cap: Option.Option<bigint>): Option.Option<Fees> => {
  const capped = (fee: bigint) => Option.match(cap, { onNone: () => fee, onSome: (limit) => min(fee, limit) })
  if ("gasPrice" in previous) {
    if (!("gasPrice" in current)) return Option.none()
    const least = minimumReplacementFee(previous.gasPrice)
    const gasPrice = capped(max(least, current.gasPrice))
    return gasPrice < least ? Option.none() : Option.some({ gasPrice })
  }
  if ("gasPrice" in current) return Option.none()
  const leastFee = minimumReplacementFee(previous.maxFeePerGas)
  const leastTip = minimumReplacementFee(previous.maxPriorityFeePerGas)
  const tip = max(leastTip, current.maxPriorityFeePerGas)
  const maxFeePerGas = capped(max(max(leastFee, current.maxFeePerGas), tip))
  const maxPriorityFeePerGas = min(tip, maxFeePerGas)
  return maxFeePerGas < leastFee || maxPriorityFeePerGas < leastTip
    ? Option.none()
    : Option.some({ maxFeePerGas, maxPriorityFeePerGas })
}

/** Fees as signed first: the estimate, capped by `cap` (the tip never above the fee cap). */
export const cappedFees = (estimate: Fees, cap: Option.Option<bigint>): Fees =>
  Option.match(cap, {
    onNone: () => estimate,
    onSome: (limit) =>
      "gasPrice" in estimate
        ? { gasPrice: min(estimate.gasPrice, limit) }
        : {
            maxFeePerGas: min(estimate.maxFeePerGas, limit),
            maxPriorityFeePerGas: min(estimate.maxPriorityFeePerGas, limit)
          }
  })
