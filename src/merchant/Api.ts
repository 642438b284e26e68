import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Either, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { ApiError, ChainUnavailable, RateLimited } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { textHeader, withResponseHeaders } from "../http/OpenApiDocument.js"
import { parseAmount } from "./Money.js"
import { PaymentRequiredBody, SettleResponse } from "./X402.js"

export const OrderStatus = Schema.Literal("open", "settling", "paid", "expired").annotations({
  identifier: "OrderStatus",
  description: "open -> settling -> paid; settling -> open when settlement fails; open -> expired after ORDER_TTL"
})
export type OrderStatus = typeof OrderStatus.Type

export class Order extends Schema.Class<Order>("Order")({
  id: Schema.String,
  amount: Schema.String.annotations({ description: "decimal USD string, as sent at creation" }),
  description: Schema.String,
  status: OrderStatus,
  payer: Schema.optional(Address).annotations({ description: "present once paid" }),
  tx: Schema.optional(Schema.String).annotations({ description: "settlement transaction hash, once paid" }),
  createdAt: Schema.Number,
  expiresAt: Schema.Number,
  amountUsd: Schema.optional(Schema.String).annotations({ description: "normalised amount; order creation only" })
}) {}

/** 202: the payment was accepted and is being settled; poll the order. */
export const SettlingOrder = Schema.Struct({ ...Order.fields, status: Schema.Literal("settling") }).annotations({
  identifier: "SettlingOrder",
  description: "The order while its payment is being settled (Location: the order to poll)."
})

const CreateOrder = Schema.Struct({
  amount: Schema.String.pipe(
    Schema.filter((text) => Either.match(parseAmount(text), { onLeft: (message) => message, onRight: () => true }))
  ),
  description: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(500))
})

export class OrderNotFound extends ApiError("OrderNotFound", "ORDER_NOT_FOUND", 404, "No order with this id.") {}

export class OrderExpired extends ApiError("OrderExpired", "ORDER_EXPIRED", 409, "The order expired unpaid.") {}

export class OrderAlreadyPaid extends ApiError(
  "OrderAlreadyPaid",
  "ORDER_ALREADY_PAID",
  409,
  "The order was paid by another payment."
) {}

export class PaymentInProgress extends ApiError(
  "PaymentInProgress",
  "PAYMENT_IN_PROGRESS",
  409,
  "A payment for this order is being settled."
) {}

export class RelayerUnfunded extends ApiError(
  "RelayerUnfunded",
  "RELAYER_UNFUNDED",
  503,
  "The relayer cannot pay gas for a settlement now; nothing was reserved: retry later (see Retry-After)."
) {}

export class RelayerPricedOut extends ApiError(
  "RelayerPricedOut",
  "RELAYER_PRICED_OUT",
  503,
  "The chain's base fee is above the relayer's cap (MAX_FEE_PER_GAS) and the relayer already holds as many " +
    "settlements waiting for it to fall as it may; nothing was reserved: retry later (see Retry-After)."
) {}

const PaymentRequiredCode = Schema.Literal("PAYMENT_REQUIRED", "PAYMENT_INVALID", "SETTLEMENT_FAILED")

/**
 * 402: the x402 v2 PaymentRequired object (also in the PAYMENT-REQUIRED header) plus our `code`.
 * `settlement` is not in the body: it goes out as the PAYMENT-RESPONSE header.
 */
export class PaymentRequired extends Schema.TaggedError<PaymentRequired>()("PaymentRequired", {
  body: PaymentRequiredBody,
  code: PaymentRequiredCode,
  settlement: Schema.optional(SettleResponse)
}) {
  static readonly wire = Schema.transform(
    Schema.Struct({ ...PaymentRequiredBody.fields, code: PaymentRequiredCode }).annotations({
      identifier: "PaymentRequired",
      description:
        "x402 v2 PaymentRequired (same JSON as the PAYMENT-REQUIRED header). PAYMENT_REQUIRED: no payment sent; " +
        "PAYMENT_INVALID: the payment was refused, `error` is the reason; SETTLEMENT_FAILED: the transfer failed " +
        "(PAYMENT-RESPONSE says why)."
    }),
    Schema.typeSchema(PaymentRequired),
    {
      strict: true,
      decode: ({ code, ...body }) => new PaymentRequired({ body, code }),
      encode: ({ body, code }) => ({ ...body, code })
    }
  ).annotations(HttpApiSchema.annotations({ status: 402 }))
}

const OrderPath = Schema.Struct({
  id: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9_-]{1,64}$/, { message: () => "must be an order id" }))
})
const PaymentHeaders = Schema.Struct({
  // Header keys are matched lower-case; clients send PAYMENT-SIGNATURE.
  "payment-signature": Schema.optional(Schema.String)
})

const PaymentRequiredHeader = textHeader(
  "The x402 v2 PaymentRequired object (the 402 body without `code`): standard base64 of its UTF-8 JSON.",
  { contentEncoding: "base64" }
)

const paymentResponseHeader = (when: string) =>
  textHeader(
    `The x402 v2 SettleResponse (success, transaction, network, payer, errorReason): standard base64 of its UTF-8 JSON. ${when}`,
    { contentEncoding: "base64" }
  )

/** The x402 headers the pay endpoints answer with (merchant/Http.ts sets them). */
const x402Headers = withResponseHeaders((status) =>
  status === "200"
    ? { "PAYMENT-RESPONSE": paymentResponseHeader("Sent when this request carried the payment that settled.") }
    : status === "202"
      ? { Location: textHeader("The order to poll: /merchant/orders/{id}.") }
      : status === "402"
        ? {
            "PAYMENT-REQUIRED": PaymentRequiredHeader,
            "PAYMENT-RESPONSE": paymentResponseHeader("Sent with SETTLEMENT_FAILED only: why the transfer failed.")
          }
        : {}
)

const payEndpoint = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "GET" | "POST">) =>
  endpoint
    .setPath(withFieldMessages(OrderPath))
    .setHeaders(withFieldMessages(PaymentHeaders))
    .addSuccess(Order)
    .addSuccess(SettlingOrder, { status: 202 })
    .addError(OrderNotFound.wire)
    .addError(OrderExpired.wire)
    .addError(OrderAlreadyPaid.wire)
    .addError(PaymentInProgress.wire)
    .addError(PaymentRequired.wire)
    .addError(ChainUnavailable.wire)
    .addError(RelayerUnfunded.wire)
    .addError(RelayerPricedOut.wire)
    .annotate(
      OpenApi.Description,
      "x402 v2: without PAYMENT-SIGNATURE answers 402 with PAYMENT-REQUIRED (or 200 with the order once paid); " +
        "with it, verifies and settles the EIP-3009 authorization once and answers 200 with the paid order and a " +
        "PAYMENT-RESPONSE header, or 202 with the settling order when the settlement's outcome is not known within " +
        "SETTLEMENT_WAIT (poll GET /merchant/orders/{id}: it becomes paid, or open when nothing was transferred). " +
        "503 CHAIN_UNAVAILABLE: the chain did not answer before anything was reserved; 503 RELAYER_UNFUNDED: the " +
        "relayer cannot pay gas now, nothing was reserved; 503 RELAYER_PRICED_OUT: the chain's base fee is above " +
        "MAX_FEE_PER_GAS and the relayer holds all the settlements it may while it waits (those answered 202 " +
        "settling), nothing was reserved. GET and POST behave alike. The requirements' amount is " +
        "the order's and its own value below a micro-dollar (which the authorization signs: it pays no other " +
        "order); the payment must name the 402's resource and be valid for at most maxTimeoutSeconds (+30 s)."
    )
    .annotate(OpenApi.Transform, x402Headers)

export class MerchantApi extends HttpApiGroup.make("merchant")
  .add(
    HttpApiEndpoint.post("createOrder", "/merchant/orders")
      .setPayload(withFieldMessages(CreateOrder))
      .addSuccess(Order)
      .addError(RateLimited.wire)
      .annotate(OpenApi.Summary, "Create an order")
      .annotate(
        OpenApi.Description,
        "Creates an open order payable in USD1 within ORDER_TTL; pay it at /merchant/orders/{id}/pay. Rate " +
          "limited per client (RATE_LIMIT_ORDERS a minute)."
      )
  )
  .add(
    HttpApiEndpoint.get("getOrder", "/merchant/orders/:id")
      .setPath(withFieldMessages(OrderPath))
      .addSuccess(Order)
      .addError(OrderNotFound.wire)
      .annotate(OpenApi.Summary, "Read an order")
      .annotate(
        OpenApi.Description,
        "The order and its status: open, settling (poll again), paid (with the payer and the settlement " +
          "transaction) or expired."
      )
  )
  .add(
    payEndpoint(HttpApiEndpoint.get("payGet", "/merchant/orders/:id/pay")).annotate(
      OpenApi.Summary,
      "Pay an order (GET)"
    )
  )
  .add(payEndpoint(HttpApiEndpoint.post("pay", "/merchant/orders/:id/pay")).annotate(OpenApi.Summary, "Pay an order"))
  .annotate(OpenApi.Title, "Demo merchant")
  .annotate(
    OpenApi.Description,
    "A demo merchant paid over x402 v2 in USD1 (served when MERCHANT_PAY_TO is set): create an order, then pay " +
      "it with an EIP-3009 authorization in the PAYMENT-SIGNATURE header. The payment is settled on chain once; " +
      "paid from a card holder's address, it shows on their card statement."
  ) {}
