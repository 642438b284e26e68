/**
 * The calls the payment path encodes itself (its hot calls skip viem's actions): each function's
 * calldata and result codec, and `transferWithAuthorization`'s calldata for any signature.
 */
import {
  type AbiFunction,
  concatHex,
  decodeAbiParameters,
  encodeAbiParameters,
  type Hex,
  parseAbiItem,
  toFunctionSelector
} from "viem"
import type { TransferAuthorization } from "./ChainClient.js"

/** One function's calldata and result codec, its selector computed once. */
export const abiFunction = (signature: string) => {
  const item = parseAbiItem(signature) as AbiFunction
  const selector = toFunctionSelector(item)
  return {
    encode: (args: ReadonlyArray<unknown>): Hex => concatHex([selector, encodeAbiParameters(item.inputs, args)]),
    decode: (data: Hex) => decodeAbiParameters(item.outputs, data)
  }
}

const transferWithVrs = abiFunction(
  "function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)"
)
const transferWithBytes = abiFunction(
  "function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)"
)
export const authorizationStateOf = abiFunction(
  "function authorizationState(address authorizer, bytes32 nonce) view returns (bool)"
)
export const balanceOfCall = abiFunction("function balanceOf(address owner) view returns (uint256)")
export const aggregate3 = abiFunction(
  "function aggregate3((address target, bool allowFailure, bytes callData)[] calls) payable returns ((bool success, bytes returnData)[] returnData)"
)

/** A Chainlink AggregatorV3 feed's reads and a stock token's pause flag, for the price refresh's multicall. */
export const latestRoundDataCall = abiFunction(
  "function latestRoundData() view returns (uint80 roundId, int256 answer, uint256 startedAt, uint256 updatedAt, uint80 answeredInRound)"
)
export const decimalsCall = abiFunction("function decimals() view returns (uint8)")
export const pausedCall = abiFunction("function paused() view returns (bool)")

/**
 * `transferWithAuthorization`'s calldata: a 65-byte signature as (v, r, s), anything else as
 * bytes. Total over any bytes: the parts are cut, not parsed (a `v` of 0 or 1 is read as 27 or
 * 28, any other byte is passed as it is), and the token judges them (a bad one is its
 * "invalid signature"), so no signature can make this throw.
 */
export const transferCall = (a: TransferAuthorization, signature: Hex) => {
  const common = [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce] as const
  // A contract wallet's signature goes through the bytes overload, which asks ERC-1271.
  if (signature.length !== 132) return { vrs: false, data: transferWithBytes.encode([...common, signature]) }
  const r = `0x${signature.slice(2, 66)}` as Hex
  const s = `0x${signature.slice(66, 130)}` as Hex
  const v = Number.parseInt(signature.slice(130, 132), 16)
  return { vrs: true, data: transferWithVrs.encode([...common, v < 2 ? v + 27 : v, r, s]) }
}
