/**
 * The bulk balance read's calldata and result, built and read without a node: byte for byte the
 * ABI's encoding of `aggregate3` over each `balanceOf`; the answer read as the ABI's decoder reads
 * it, and anything else (a read that returned no uint256, a failed call, another number of results,
 * bytes cut or altered) an error, never a made-up balance.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import {
  decodeFunctionData,
  decodeFunctionResult,
  encodeAbiParameters,
  encodeFunctionData,
  encodeFunctionResult,
  erc20Abi,
  getAddress,
  type Hex,
  multicall3Abi,
  toHex
} from "viem"
import type { Address } from "../../src/chain/Address.js"
import { balanceReads, balancesRead } from "../../src/chain/Multicall.js"

const address = fc.uint8Array({ minLength: 20, maxLength: 20 }).map((bytes) => getAddress(toHex(bytes)) as Address)
const read = fc.record({ token: address, owner: address })
const uint256 = fc.bigInt({ min: 0n, max: 2n ** 256n - 1n })

/** What `aggregate3` returns for these return datas, every call successful. */
const aggregateResult = (returnData: ReadonlyArray<Hex>) =>
  encodeFunctionResult({
    abi: multicall3Abi,
    functionName: "aggregate3",
    result: returnData.map((data) => ({ success: true, returnData: data }))
  })

describe("bulk balance reads", () => {
  it("each read is the ABI's balanceOf(owner) to its token, all required, in order", () =>
    fc.assert(
      fc.property(fc.array(read, { maxLength: 20 }), (reads) => {
        const calls = reads.map(({ token, owner }) => ({
          target: token,
          allowFailure: false,
          callData: encodeFunctionData({ abi: erc20Abi, functionName: "balanceOf", args: [owner] })
        }))
        expect(decodeFunctionData({ abi: multicall3Abi, data: balanceReads(reads) }).args[0]).toEqual(calls)
        // Byte for byte the ABI encoder's output.
        expect(balanceReads(reads)).toBe(
          encodeFunctionData({ abi: multicall3Abi, functionName: "aggregate3", args: [calls] })
        )
      })
    ))

  it("an owner or token that is not an address is refused, not encoded", () => {
    expect(() => balanceReads([{ token: "0x1234" as Address, owner: "0x1234" as Address }])).toThrow(
      "a balance read's token is not an address: 0x1234"
    )
  })

  it("the result is each uint256 returned, in order", () =>
    fc.assert(
      fc.property(fc.array(uint256, { maxLength: 20 }), (balances) => {
        const returned = balances.map((value) => encodeAbiParameters([{ type: "uint256" }], [value]))
        expect(balancesRead(aggregateResult(returned), balances.length)).toEqual(balances)
      })
    ))

  it("a read that returned nothing (no contract at the token's address) is an error, not a zero balance", () => {
    expect(() => balancesRead(aggregateResult([encodeAbiParameters([{ type: "uint256" }], [5n]), "0x"]), 2)).toThrow(
      "balanceOf read 1 returned 0 bytes, not a uint256"
    )
  })

  it("another number of results than reads, or a failed call, is an error", () => {
    const five = encodeAbiParameters([{ type: "uint256" }], [5n])
    expect(() => balancesRead(aggregateResult([five, five]), 3)).toThrow("the multicall answered 2 results for 3 reads")
    const failed = encodeFunctionResult({
      abi: multicall3Abi,
      functionName: "aggregate3",
      result: [
        { success: true, returnData: five },
        { success: false, returnData: five }
      ]
    })
    expect(() => balancesRead(failed, 2)).toThrow("balanceOf read 1 failed")
    expect(() => balancesRead("0x12345" as Hex, 0)).toThrow("not hex bytes")
  })

  it("an answer cut short or with any byte altered reads as the ABI's decoder reads it, or is an error", () =>
    fc.assert(
      fc.property(
        fc.array(uint256, { minLength: 1, maxLength: 6 }),
        fc.nat(),
        fc.integer({ min: 0, max: 255 }),
        fc.boolean(),
        (balances, position, value, cut) => {
          const valid = aggregateResult(
            balances.map((balance) => encodeAbiParameters([{ type: "uint256" }], [balance]))
          )
          const at = position % ((valid.length - 2) / 2)
          const changed = (
            cut
              ? valid.slice(0, 2 + at * 2)
              : `${valid.slice(0, 2 + at * 2)}${value.toString(16).padStart(2, "0")}${valid.slice(4 + at * 2)}`
          ) as Hex
          let ours: ReadonlyArray<bigint> | undefined
          try {
            ours = balancesRead(changed, balances.length)
          } catch {
            return
          }
          // What we read, the ABI's decoder reads too: every call successful, each a 32-byte uint256.
          const decoded = decodeFunctionResult({ abi: multicall3Abi, functionName: "aggregate3", data: changed })
          expect(decoded.map(({ success }) => success)).toEqual(balances.map(() => true))
          expect(decoded.map(({ returnData }) => BigInt(returnData))).toEqual(ours)
          expect(decoded.every(({ returnData }) => returnData.length === 66)).toBe(true)
        }
      ),
      { numRuns: 2_000 }
    ))
})
