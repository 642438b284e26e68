/**
 * Bulk reads through a Multicall3-compatible `aggregate3`: where the contract is, how many calls go
 * into one `eth_call`, and the reshaping of a flat result into rows. Pure.
 */
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
