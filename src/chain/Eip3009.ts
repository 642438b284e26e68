/** EIP-3009 `TransferWithAuthorization` typed data under the USD1 token's EIP-712 domain. Pure. */
import type { TransferAuthorization, Usd1Token } from "./ChainClient.js"

export const transferWithAuthorizationTypedData = (
  authorization: TransferAuthorization,
  token: { readonly chainId: number; readonly usd1: Usd1Token }
) =>
  ({
    domain: {
      name: token.usd1.name,
      version: token.usd1.version,
      chainId: token.chainId,
      verifyingContract: token.usd1.address
    },
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
