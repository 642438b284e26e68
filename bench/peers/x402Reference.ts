/**
 * Peer of the x402 pay benchmark: the reference x402 v2 resource server, `@x402/express` with
 * `@x402/core`'s resource server and an in-process `@x402/core` facilitator running `@x402/evm`'s
 * exact scheme, on the same devnet, token and relayer account as the service.
 *
 * `POST /pay` costs the benchmark's order amount in USD1 (the same requirements the service
 * offers: exact scheme, the token's EIP-712 domain, 300 s timeout); unpaid it answers 402, paid it
 * verifies, runs the handler, settles on chain and answers 200 with PAYMENT-RESPONSE. There are no
 * orders and no database. The relayer account uses viem's nonce manager, so concurrent settlements
 * take consecutive nonces (as the service's send queue does).
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): package imports only.
 * Environment: PORT, CHAIN_RPC_URL, CHAIN_ID, USD1_ADDRESS, USD1_EIP712_NAME, USD1_EIP712_VERSION,
 * RELAYER_PRIVATE_KEY, MERCHANT_PAY_TO, PRICE_ATOMIC.
 */
import { x402Facilitator } from "@x402/core/facilitator"
import type { FacilitatorClient } from "@x402/core/server"
import { toFacilitatorEvmSigner } from "@x402/evm"
import { ExactEvmScheme as ExactEvmFacilitatorScheme } from "@x402/evm/exact/facilitator"
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server"
import { paymentMiddleware, x402ResourceServer } from "@x402/express"
import express from "express"
import { createWalletClient, defineChain, type Hex, http, publicActions } from "viem"
import { nonceManager, privateKeyToAccount } from "viem/accounts"

const setting = (name: string) => {
  const value = process.env[name]
  if (value === undefined || value === "") throw new Error(`${name} is required`)
  return value
}

const rpcUrl = setting("CHAIN_RPC_URL")
const chainId = Number(setting("CHAIN_ID"))
const network = `eip155:${chainId}` as const
const chain = defineChain({
  id: chainId,
  name: "Devnet",
  nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
  rpcUrls: { default: { http: [rpcUrl] } }
})
const relayer = privateKeyToAccount(setting("RELAYER_PRIVATE_KEY") as Hex, { nonceManager })
// The same client settings as the service on a local devnet: 20 ms polling, writes never retried.
const client = createWalletClient({
  account: relayer,
  chain,
  transport: http(rpcUrl, { retryCount: 0 }),
  pollingInterval: 20
}).extend(publicActions)

type ReadArgs = Parameters<typeof client.readContract>[0]
type WriteArgs = Parameters<typeof client.writeContract>[0]
type TypedDataArgs = Parameters<typeof client.verifyTypedData>[0]

const signer = toFacilitatorEvmSigner({
  address: relayer.address,
  getCode: (args) => client.getCode(args),
  readContract: (args) => client.readContract({ ...args, args: args.args ?? [] } as ReadArgs),
  verifyTypedData: (args) => client.verifyTypedData(args as TypedDataArgs),
  writeContract: (args) => client.writeContract({ ...args, args: args.args ?? [] } as WriteArgs),
  sendTransaction: (args) => client.sendTransaction(args),
  waitForTransactionReceipt: (args) => client.waitForTransactionReceipt(args)
})

const facilitator = new x402Facilitator().register(network, new ExactEvmFacilitatorScheme(signer))
const inProcessFacilitator: FacilitatorClient = {
  verify: (payload, requirements) => facilitator.verify(payload, requirements),
  settle: (payload, requirements) => facilitator.settle(payload, requirements),
  // The facilitator lists networks as plain strings; they are the CAIP-2 ids registered above.
  getSupported: async () => facilitator.getSupported() as Awaited<ReturnType<FacilitatorClient["getSupported"]>>
}
const resourceServer = new x402ResourceServer(inProcessFacilitator).register(network, new ExactEvmServerScheme())

const app = express()
app.get("/health", (_req, res) => {
  res.json({ status: "ok" })
})
app.use(
  paymentMiddleware(
    {
      "POST /pay": {
        accepts: {
          scheme: "exact",
          network,
          payTo: setting("MERCHANT_PAY_TO"),
          maxTimeoutSeconds: 300,
          price: {
            amount: setting("PRICE_ATOMIC"),
            asset: setting("USD1_ADDRESS"),
            extra: { name: setting("USD1_EIP712_NAME"), version: setting("USD1_EIP712_VERSION") }
          }
        },
        description: "bench",
        mimeType: "application/json"
      }
    },
    resourceServer
  )
)
app.post("/pay", (_req, res) => {
  res.json({ description: "bench", status: "paid" })
})
const server = app.listen(Number(setting("PORT")), "127.0.0.1")

process.once("SIGTERM", () => {
  server.close()
  server.closeIdleConnections()
})
