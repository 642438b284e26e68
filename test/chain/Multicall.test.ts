/**
 * The bulk balance read's calldata and result, built and read without a node: the same bytes as
 * the ABI encoding of each `balanceOf`, and a read that returned no uint256 is an error, not 0.
 */
import { describe, expect, it } from "@effect/vitest"
import fc from "fast-check"
import {
  decodeFunctionData,
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
        const { args } = decodeFunctionData({ abi: multicall3Abi, data: balanceReads(reads) })
        expect(args[0]).toEqual(
          reads.map(({ token, owner }) => ({
            target: token,
            allowFailure: false,
            callData: encodeFunctionData({ abi: erc20Abi, functionName: "balanceOf", args: [owner] })
          }))
        )
      })
    ))

  it("the result is each uint256 returned, in order", () =>
    fc.assert(
      fc.property(fc.array(uint256, { maxLength: 20 }), (balances) => {
        const returned = balances.map((value) => encodeAbiParameters([{ type: "uint256" }], [value]))
        expect(balancesRead(aggregateResult(returned))).toEqual(balances)
      })
    ))

  it("a read that returned nothing (no contract at the token's address) is an error, not a zero balance", () => {
    expect(() => balancesRead(aggregateResult([encodeAbiParameters([{ type: "uint256" }], [5n]), "0x"]))).toThrow(
      "balanceOf read 1 returned 0x, not a uint256"
    )
  })
})
