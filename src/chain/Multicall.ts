/**
 * Bulk reads through a Multicall3-compatible `aggregate3`: where the contract is, how many calls go
 * into one `eth_call`, and the reshaping of a flat result into rows. Pure.
 */
import type { Hex } from "viem"
import { ADDRESS_PATTERN, type Address } from "./Address.js"

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
const BALANCE_OF = "70a08231"
/** `aggregate3((address,bool,bytes)[])`'s selector. */
const AGGREGATE3 = "0x82ad56cb"
/** Bytes of one `(address target, bool allowFailure, bytes callData)` whose call data is a `balanceOf`. */
const BALANCE_READ_BYTES = 192

const word = (n: number) => n.toString(16).padStart(64, "0")
const addressWord = (address: Address, role: string) => {
  if (!ADDRESS_PATTERN.test(address)) throw new Error(`a balance read's ${role} is not an address: ${address}`)
  return address.slice(2).toLowerCase().padStart(64, "0")
}
/** allowFailure false, the call data's offset in its tuple (3 words in) and its length (36 bytes). */
const READ_FIXED_WORDS = `${word(0)}${word(0x60)}${word(36)}`
/** The 36 bytes of call data padded to 64. */
const CALL_DATA_PADDING = "0".repeat(56)

/**
 * One `aggregate3` of `balanceOf(owner)` reads, every read required to succeed, in the ABI's
 * encoding written directly: through the generic ABI encoder (and its decoder for the answer) the
 * multicall was a third of an agent replica's CPU per card on a real chain (issue 23's profile).
 * `test/chain/Multicall.test.ts` checks the bytes against the ABI's.
 */
export const balanceReads = (reads: ReadonlyArray<{ readonly token: Address; readonly owner: Address }>): Hex => {
  const parts: Array<string> = [AGGREGATE3, word(0x20), word(reads.length)]
  for (let i = 0; i < reads.length; i++) parts.push(word(reads.length * 32 + i * BALANCE_READ_BYTES))
  for (const { token, owner } of reads) {
    parts.push(
      addressWord(token, "token"),
      READ_FIXED_WORDS,
      BALANCE_OF,
      addressWord(owner, "owner"),
      CALL_DATA_PADDING
    )
  }
  return parts.join("") as Hex
}

const HEX = /^0x(?:[0-9a-fA-F]{2})*$/
/** A word's value where the ABI puts a length or an offset: below 2^48, or the answer is malformed. */
const SMALL_WORD = /^0{52}/

/**
 * The balances an `aggregate3` of `count` `balanceReads` returned, in order, read from the ABI's
 * encoding directly (offsets followed, every one bounds-checked). Throws on an answer that is not
 * that: another number of results, a failed call, a read that returned no uint256 (no contract at
 * the token's address), or bytes that end early.
 */
export const balancesRead = (result: Hex, count: number): ReadonlyArray<bigint> => {
  if (!HEX.test(result)) throw new Error("the multicall's answer is not hex bytes")
  const bytes = (result.length - 2) / 2
  const wordAt = (at: number) => {
    if (!Number.isSafeInteger(at) || at < 0 || at + 32 > bytes)
      throw new Error(`the multicall's answer (${bytes} bytes) ends before byte ${at + 32}`)
    return result.slice(2 + at * 2, 2 + at * 2 + 64)
  }
  const smallAt = (at: number) => {
    const value = wordAt(at)
    if (!SMALL_WORD.test(value))
      throw new Error(`the multicall's answer has an offset or length out of range at byte ${at}`)
    return Number.parseInt(value.slice(52), 16)
  }
  const array = smallAt(0)
  const results = smallAt(array)
  if (results !== count) throw new Error(`the multicall answered ${results} results for ${count} reads`)
  const heads = array + 32
  const balances = new Array<bigint>(count)
  for (let i = 0; i < count; i++) {
    const element = heads + smallAt(heads + i * 32)
    if (smallAt(element) !== 1) throw new Error(`balanceOf read ${i} failed`)
    const returned = element + smallAt(element + 32)
    const length = smallAt(returned)
    if (length !== 32) throw new Error(`balanceOf read ${i} returned ${length} bytes, not a uint256`)
    balances[i] = BigInt(`0x${wordAt(returned + 32)}`)
  }
  return balances
}
