/**
 * Bulk reads through a Multicall3-compatible `aggregate3`: where the contract is, how many calls go
 * into one `eth_call`, and the reshaping of a flat result into rows. Pure.
 */
import { decodeFunctionResult, encodeFunctionData, type Hex, hexToBigInt, multicall3Abi } from "viem"
import type { Address } from "./Address.js"

/** Multicall3's canonical address, the same on most EVM chains; the embedded devnet places ours there. */
export const MULTICALL3_ADDRESS: Address = "0xcA11bde05977b3631167028862bE2a173976CA11"

/** Calls per `eth_call`: 500 `balanceOf` reads stay far below a node's gas cap for calls. */
export const MULTICALL_CHUNK = 500

/** `items` in consecutive slices of at most `size`. */
export const chunksOf = <A>(items: ReadonlyArray<A>, size: number): ReadonlyArray<ReadonlyArray<A>> =>
  Array.from({ length: Math.ceil(items.length / size) }, (_, i) => items.slice(i * size, (i + 1) * size))

/** A row-major flat list as `rows` rows of `width` values. */
export const rowsOf = <A>(flat: ReadonlyArray<A>, rows: number, width: number): ReadonlyArray<ReadonlyArray<A>> =>
  Array.from({ length: rows }, (_, i) => flat.slice(i * width, (i + 1) * width))

/** `balanceOf(address)`'s selector. */
const BALANCE_OF = "0x70a08231"

/**
 * One `aggregate3` of `balanceOf(owner)` reads, every read required to succeed. Each read's calldata
 * is the selector and the padded address, written directly: encoding it through the ABI, as a
 * generic multicall does, cost more CPU than the rest of an agent tick's work per card.
 */
export const balanceReads = (reads: ReadonlyArray<{ readonly token: Address; readonly owner: Address }>): Hex =>
  encodeFunctionData({
    abi: multicall3Abi,
    functionName: "aggregate3",
    args: [
      reads.map(({ token, owner }) => ({
        target: token,
        allowFailure: false,
        callData: `${BALANCE_OF}${owner.slice(2).toLowerCase().padStart(64, "0")}` as Hex
      }))
    ]
  })

/** The balances an `aggregate3` of `balanceReads` returned, in order; throws on a read that returned no uint256. */
export const balancesRead = (result: Hex): ReadonlyArray<bigint> =>
  decodeFunctionResult({ abi: multicall3Abi, functionName: "aggregate3", data: result }).map(({ returnData }, i) => {
    if (returnData.length !== 66) throw new Error(`balanceOf read ${i} returned ${returnData}, not a uint256`)
    return hexToBigInt(returnData)
  })
