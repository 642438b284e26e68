/**
 * Paying an order of the demo merchant from the browser with the standard x402 client
 * (`@x402/fetch` + `@x402/evm`): the first request answers 402 with the payment requirements, the
 * wallet signs the EIP-3009 authorization (typed data), the client retries with PAYMENT-SIGNATURE.
 * Loaded on demand: x402 and its schemas are a chunk of their own.
 */
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch"
import { AppError, fieldMessages } from "./api.js"
import type { Signer } from "./signers.js"

export interface PaymentOutcome {
  /** 200: paid, with the receipt; 202: accepted, being settled (poll the order). */
  readonly status: 200 | 202
  readonly transaction: string | undefined
  readonly payer: string | undefined
  readonly network: string | undefined
}

/** What the service says about a refused payment, as an AppError (x402 reasons are the `error` text). */
const refusal = async (response: Response) => {
  const body = (await response.json().catch(() => ({}))) as { readonly error?: unknown; readonly code?: unknown }
  const message = typeof body.error === "string" ? body.error : `The payment was refused (HTTP ${response.status}).`
  const code = typeof body.code === "string" ? body.code : undefined
  const advice =
    code === "PAYMENT_INVALID" && /insufficient/i.test(message)
      ? "The card does not hold enough USD1 for this order."
      : code === "ORDER_EXPIRED"
        ? "Create a new order."
        : "Try again; the order stays open until it expires."
  return new AppError(message, code, advice, fieldMessages(message))
}

export const payOrder = async (orderId: string, signer: Signer): Promise<PaymentOutcome> => {
  const client = new x402Client()
  registerExactEvmScheme(client, {
    signer: { address: signer.address, signTypedData: (data) => signer.signTypedData(data) }
  })
  // USD1 on this service's chain is not one of the library's built-in assets.
  client.setSpendControls({ allowedAssets: true })
  const pay = wrapFetchWithPayment(fetch, client)
  const response = await pay(`${location.origin}/merchant/orders/${encodeURIComponent(orderId)}/pay`, {
    method: "POST"
  })
  if (response.status !== 200 && response.status !== 202) throw await refusal(response)
  const header = response.headers.get("PAYMENT-RESPONSE")
  const receipt = header === null ? undefined : decodePaymentResponseHeader(header)
  return {
    status: response.status,
    transaction: receipt?.transaction,
    payer: receipt?.payer,
    network: receipt?.network
  }
}
