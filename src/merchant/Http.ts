import { HttpApiBuilder, HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Option, Schema } from "effect"
import { Api } from "../Api.js"
import { readinessCheck } from "../health/Readiness.js"
import { feature } from "../http/Feature.js"
import { RateLimiter } from "../http/RateLimit.js"
import { AppConfig } from "../runtime/Config.js"
import { MerchantApi, Order, type PaymentRequired } from "./Api.js"
import { Merchant, type PaidOrder, SettlementReconcilerLive } from "./Merchant.js"
import { encodeHeader } from "./X402.js"

const setHeaders = (headers: Record<string, string>) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeaders(response, headers))
  )

/**
 * x402 headers: PAYMENT-REQUIRED on a 402, PAYMENT-RESPONSE whenever a settlement was decided; a
 * settlement still in progress is 202 with the settling order and where to poll it.
 */
const withX402Headers = <E>(effect: Effect.Effect<PaidOrder, E | PaymentRequired>) =>
  effect.pipe(
    Effect.tapError((error) => {
      if (typeof error !== "object" || error === null || (error as { _tag?: string })._tag !== "PaymentRequired") {
        return Effect.void
      }
      const refused = error as PaymentRequired
      return setHeaders({
        "payment-required": encodeHeader(refused.body),
        ...(refused.settlement === undefined ? {} : { "payment-response": encodeHeader(refused.settlement) })
      })
    }),
    Effect.tap(({ receipt }) =>
      Option.isSome(receipt) ? setHeaders({ "payment-response": encodeHeader(receipt.value) }) : Effect.void
    ),
    Effect.map(({ order, inProgress }) =>
      inProgress
        ? HttpServerResponse.unsafeJson(Schema.encodeSync(Order)(order), {
            status: 202,
            headers: { location: `/merchant/orders/${order.id}` }
          })
        : order
    )
  )

const MerchantHttpLive = HttpApiBuilder.group(Api, "merchant", (handlers) =>
  Effect.gen(function* () {
    const merchant = yield* Merchant
    const limiter = yield* RateLimiter
    const pay = ({ path, headers }: { path: { id: string }; headers: { "payment-signature"?: string | undefined } }) =>
      withX402Headers(merchant.pay(path.id, Option.fromNullable(headers["payment-signature"])))
    return handlers
      .handle("createOrder", ({ payload }) =>
        limiter.consume("orders").pipe(Effect.zipRight(merchant.createOrder(payload)))
      )
      .handle("getOrder", ({ path }) => merchant.getOrder(path.id))
      .handle("payGet", pay)
      .handle("pay", pay)
  })
)

/** /ready, while the merchant is on: settlements left without a receipt mean the relayer is stuck. */
const StuckSettlementsCheck = readinessCheck(
  Effect.flatMap(Merchant, (merchant) =>
    Effect.map(
      merchant.stuckSettlements,
      Option.map((why) => `relayer stuck: ${why}`)
    )
  )
)

/**
 * The demo merchant, while MERCHANT_PAY_TO is set: its orders, its settlement loops and its check
 * for /ready, on one `Merchant`.
 */
export const MerchantFeature = feature({
  group: MerchantApi,
  enabled: Effect.map(AppConfig, (config) => Option.isSome(config.merchantPayTo)),
  live: Layer.mergeAll(MerchantHttpLive, SettlementReconcilerLive, StuckSettlementsCheck).pipe(
    Layer.provide(Merchant.Default)
  ),
  whenOff: {
    paths: ["/merchant"],
    message: "the demo merchant is off: /merchant/* exists when MERCHANT_PAY_TO is set"
  }
})
