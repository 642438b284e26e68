/** EIP-3009 `TransferWithAuthorization` typed data under the USD1 token's EIP-712 domain. Pure. */
import type { TransferAuthorization, Usd1Token } from "./ChainClient.js"

/** The USD1 token's EIP-712 domain, which its EIP-3009 and EIP-2612 signatures are made under. */
export const usd1Domain = (token: { readonly chainId: number; readonly usd1: Usd1Token }) => ({
  name: token.usd1.name,
  version: token.usd1.version,
  chainId: token.chainId,
  verifyingContract: token.usd1.address
})

export const transferWithAuthorizationTypedData = (
  authorization: TransferAuthorization,
  token: { readonly chainId: number; readonly usd1: Usd1Token }
) =>
  ({
    domain: usd1Domain(token),
    types: {
      TransferWithAuthorization: [
        { name: "from", type: "address" },
        { name: "to", type: "address" },
        { name: "value", type: "uint256" },
        { name: "validAfter", type: "uint256" },
        { name: "validBefore", type: "uint256" },
        { name: "nonce", type: "bytes32" }
      ]
    },
    primaryType: "TransferWithAuthorization",
    message: authorization
  }) as const
