import { describe, expect, it } from "@effect/vitest"
import { Option } from "effect"
import fc from "fast-check"
import { bumpedFees, cappedFees, type Fees, minimumReplacementFee } from "../../src/chain/FeeBump.js"

const wei = fc.bigInt({ min: 1n, max: 10n ** 15n })
const eip1559 = fc
  .tuple(wei, wei)
  .map(
    ([a, b]): Fees =>
      a >= b ? { maxFeePerGas: a, maxPriorityFeePerGas: b } : { maxFeePerGas: b, maxPriorityFeePerGas: a }
  )
const legacy = wei.map((gasPrice): Fees => ({ gasPrice }))
const cap = fc.option(wei, { nil: undefined }).map(Option.fromNullable)

/** Whether `next` is a raise a node takes over `previous`: both fields ×1.125 or more. */
const takenAsReplacement = (previous: Fees, next: Fees) =>
  "gasPrice" in previous
    ? "gasPrice" in next && next.gasPrice * 1000n >= previous.gasPrice * 1125n
    : !("gasPrice" in next) &&
      next.maxFeePerGas * 1000n >= previous.maxFeePerGas * 1125n &&
      next.maxPriorityFeePerGas * 1000n >= previous.maxPriorityFeePerGas * 1125n

describe("fee bumps of a stuck transaction", () => {
  it("the minimum raise is the smallest fee at least 12.5 % above", () =>
    fc.assert(
      fc.property(wei, (fee) => {
        const least = minimumReplacementFee(fee)
        expect(least * 1000n >= fee * 1125n).toBe(true)
        expect((least - 1n) * 1000n >= fee * 1125n).toBe(false)
      })
    ))

  it("an EIP-1559 bump: both fields raised 12.5 %, at least the estimate, the tip within the fee cap, within the cap", () =>
    fc.assert(
      fc.property(eip1559, eip1559, cap, (previous, current, limit) => {
        const bumped = bumpedFees(previous, current, limit)
        if (Option.isNone(bumped)) {
          // only a cap below the 12.5 % raise leaves no bump
          expect(
            Option.getOrThrow(limit) < minimumReplacementFee((previous as { maxFeePerGas: bigint }).maxFeePerGas) ||
              Option.getOrThrow(limit) <
                minimumReplacementFee((previous as { maxPriorityFeePerGas: bigint }).maxPriorityFeePerGas)
          ).toBe(true)
          return
        }
        const next = bumped.value as { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }
        expect(takenAsReplacement(previous, next)).toBe(true)
        expect(next.maxPriorityFeePerGas <= next.maxFeePerGas).toBe(true)
        if (Option.isSome(limit)) expect(next.maxFeePerGas <= limit.value).toBe(true)
        else {
          const estimate = current as { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint }
          expect(next.maxFeePerGas >= estimate.maxFeePerGas).toBe(true)
          expect(next.maxPriorityFeePerGas >= estimate.maxPriorityFeePerGas).toBe(true)
        }
      })
    ))

  it("bumped again and again, the fees only rise and stop at the cap", () =>
    fc.assert(
      fc.property(eip1559, wei, fc.integer({ min: 1, max: 40 }), (first, limit, rounds) => {
        let fees = cappedFees(first, Option.some(limit))
        for (let i = 0; i < rounds; i++) {
          const bumped = bumpedFees(fees, first, Option.some(limit))
          if (Option.isNone(bumped)) break
          expect(takenAsReplacement(fees, bumped.value)).toBe(true)
          fees = bumped.value
        }
        expect((fees as { maxFeePerGas: bigint }).maxFeePerGas <= limit).toBe(true)
      })
    ))

  it("a legacy gas price is raised 12.5 %, at least to the estimate, within the cap", () =>
    fc.assert(
      fc.property(legacy, legacy, cap, (previous, current, limit) => {
        const bumped = bumpedFees(previous, current, limit)
        if (Option.isNone(bumped)) {
          expect(Option.getOrThrow(limit) < minimumReplacementFee((previous as { gasPrice: bigint }).gasPrice)).toBe(
            true
          )
          return
        }
        expect(takenAsReplacement(previous, bumped.value)).toBe(true)
        const gasPrice = (bumped.value as { gasPrice: bigint }).gasPrice
        if (Option.isSome(limit)) expect(gasPrice <= limit.value).toBe(true)
        else expect(gasPrice >= (current as { gasPrice: bigint }).gasPrice).toBe(true)
      })
    ))

  it("a transaction of one kind is not replaced with fees of the other", () => {
    expect(bumpedFees({ gasPrice: 10n }, { maxFeePerGas: 20n, maxPriorityFeePerGas: 1n }, Option.none())).toEqual(
      Option.none()
    )
    expect(bumpedFees({ maxFeePerGas: 20n, maxPriorityFeePerGas: 1n }, { gasPrice: 10n }, Option.none())).toEqual(
      Option.none()
    )
  })
})
