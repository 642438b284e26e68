/** EIP-2612 `Permit` typed data under the USD1 token's EIP-712 domain, the `permit` call, and the calldata of the USD1 calls our accounts make. Pure. */
import type { Hex } from "viem"
import { abiFunction } from "./Calldata.js"
import type { Permit, Usd1Call, Usd1Token } from "./ChainClient.js"
import { usd1Domain } from "./Eip3009.js"

export const permitTypedData = (permit: Permit, token: { readonly chainId: number; readonly usd1: Usd1Token }) =>
  ({
    domain: usd1Domain(token),
    types: {
      Permit: [
        { name: "owner", type: "address" },
        { name: "spender", type: "address" },
        { name: "value", type: "uint256" },
        { name: "nonce", type: "uint256" },
        { name: "deadline", type: "uint256" }
      ]
    },
    primaryType: "Permit",
    message: permit
  }) as const

const permitVrs = abiFunction(
  "function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)"
)
export const noncesCall = abiFunction("function nonces(address owner) view returns (uint256)")
export const allowanceCall = abiFunction("function allowance(address owner, address spender) view returns (uint256)")

/**
 * `permit`'s calldata from a 65-byte signature (r, s, v; a `v` of 0 or 1 read as 27 or 28). EIP-2612
 * takes (v, r, s) only: a signature of another length is none (a contract wallet approves instead).
 */
export const permitCall = (permit: Permit, signature: Hex): Hex | undefined => {
  if (!/^0x[0-9a-fA-F]{130}$/.test(signature)) return undefined
  const r = `0x${signature.slice(2, 66)}` as Hex
  const s = `0x${signature.slice(66, 130)}` as Hex
  const v = Number.parseInt(signature.slice(130, 132), 16)
  return permitVrs.encode([permit.owner, permit.spender, permit.value, permit.deadline, v < 2 ? v + 27 : v, r, s])
}

const transferFromCall = abiFunction("function transferFrom(address from, address to, uint256 value) returns (bool)")
const transferToCall = abiFunction("function transfer(address to, uint256 value) returns (bool)")

/** A USD1 call's calldata; none for a permit whose signature is not 65 bytes (`permitCall`). */
export const usd1CallData = (call: Usd1Call): Hex | undefined => {
  switch (call._tag) {
    case "TransferFrom":
      return transferFromCall.encode([call.from, call.to, call.amount])
    case "Transfer":
      return transferToCall.encode([call.to, call.amount])
    case "Permit":
      return permitCall(call.permit, call.signature)
  }
}
