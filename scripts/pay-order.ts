/**
 * Pays a demo-merchant order from the command line with a standard x402 v2 client.
 *
 *   npx tsx scripts/pay-order.ts <orderId> [baseUrl]
 *
 * baseUrl defaults to this machine's service on PORT (3000 when unset).
 * PAYER_PRIVATE_KEY signs the EIP-3009 authorization; the default is the second standard anvil
 * development account, which the embedded devnet funds with 10,000 USD1.
 */
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch"
import { type Hex, parseUnits } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../src/chain/Devnet.js"

const [orderId, baseUrl = `http://localhost:${process.env.PORT ?? 3000}`] = process.argv.slice(2)
if (orderId === undefined) {
  console.error("usage: npx tsx scripts/pay-order.ts <orderId> [baseUrl]")
  process.exit(2)
}
const payer = privateKeyToAccount((process.env.PAYER_PRIVATE_KEY as Hex | undefined) ?? ANVIL_ACCOUNT_KEYS[1]!)
const payUrl = `${baseUrl}/merchant/orders/${orderId}/pay`

// The client's default spend controls pay only the assets it knows (USDC) up to $1: USD1 is allowed
// here explicitly: exactly the asset the requirements name, up to the largest order (1,000,000 and its
// own value below a micro-dollar).
const offer = await fetch(payUrl)
if (offer.status !== 402) {
  console.error(`expected 402 from ${payUrl}, got ${offer.status}: ${await offer.text()}`)
  process.exit(1)
}
const { accepts } = (await offer.json()) as { accepts: Array<{ network: `${string}:${string}`; asset: string }> }
const client = new x402Client()
registerExactEvmScheme(client, { signer: payer })
client.setSpendControls({
  allowedAssets: accepts.map((requirement) => ({
    network: requirement.network,
    asset: requirement.asset,
    maxAmountPerPayment: parseUnits("1000000.000001", 18).toString()
  }))
})

const response = await wrapFetchWithPayment(fetch, client)(payUrl, { method: "POST" })
console.log(`HTTP ${response.status}`)
console.log(JSON.stringify(await response.json(), null, 2))
const receipt = response.headers.get("PAYMENT-RESPONSE")
if (receipt !== null) console.log("PAYMENT-RESPONSE", JSON.stringify(decodePaymentResponseHeader(receipt), null, 2))
process.exit(response.ok ? 0 : 1)
