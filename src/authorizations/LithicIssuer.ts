/**
 * Lithic as the card issuer (`CARD_NETWORK=lithic`): Lithic makes the card and its number; this
 * service keeps Lithic's card token (the token its ASA requests name the card by) and the face, sealed.
 *
 * - Issue: `POST {LITHIC_API_URL}/v1/cards` with `Authorization: <API key>`, an `Idempotency-Key` and
 *   `{type: "VIRTUAL", memo, state: "OPEN"}`; the answer's `token`, `pan`, `cvv`, `exp_month` and
 *   `exp_year` (kept as `MM/YY`). The memo is the card wallet's address: an operator finds the card by
 *   it in Lithic's dashboard, and no personal data leaves for it.
 * - Retire (a replaced card): `PATCH /v1/cards/{token}` `{state: "CLOSED"}`, final at Lithic.
 *
 * Each call is bounded by 10 s, one retry included after a transport failure or a 5xx/429, with the
 * same Idempotency-Key (a retried issuance never makes two cards). The port has no error channel: a
 * failure is a defect naming the call. Lithic returns `pan` and `cvv` only to PCI-compliant programs;
 * a card without them has no face to keep, so it is closed at once and issuance dies saying why.
 * Neither the API key nor a pan or cvv ever reaches a log or an error.
 */
import { randomUUID } from "node:crypto"
import { FetchHttpClient, HttpClient, HttpClientRequest, HttpClientResponse } from "@effect/platform"
import type { ResponseError } from "@effect/platform/HttpClientError"
import { Data, Effect, Exit, Layer, Option, type ParseResult, Redacted, Schema } from "effect"
import { CardIssuer } from "../cards/CardIssuer.js"
import { type LithicSettings, networkSettings } from "./AuthorizationSettings.js"

const REQUEST_TIMEOUT = "10 seconds"

const MaybeText = Schema.optional(Schema.NullishOr(Schema.String))

/** The fields of Lithic's `Card` this issuer reads; the rest pass by. */
const LithicCard = Schema.Struct({
  token: Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100)),
  pan: MaybeText,
  cvv: MaybeText,
  exp_month: MaybeText,
  exp_year: MaybeText
})
type LithicCard = typeof LithicCard.Type

/** Lithic answered with a status other than 2xx. */
class LithicRefused extends Data.TaggedError("LithicRefused")<{ readonly status: number; readonly detail: string }> {}

const LithicErrorBody = Schema.Struct({
  message: Schema.optional(Schema.String),
  debugging_request_id: Schema.optional(Schema.String)
})

/** Lithic's own words about a refusal (its `message` and `debugging_request_id`), shortened. */
const refusalDetail = (text: string) => {
  const body = Schema.decodeUnknownOption(Schema.parseJson(LithicErrorBody))(text)
  if (Option.isNone(body)) return ""
  const { message, debugging_request_id: requestId } = body.value
  const words = [message?.slice(0, 200), requestId === undefined ? undefined : `debugging_request_id ${requestId}`]
  const said = words.filter((word) => word !== undefined)
  return said.length === 0 ? "" : `: ${said.join(", ")}`
}

/** Worth one more try: the request may not have arrived, or Lithic said to come back. */
const retryable = (error: { readonly _tag: string }) =>
  error._tag === "RequestError" || (error instanceof LithicRefused && (error.status >= 500 || error.status === 429))

/** Why a call failed, in words that carry no secret (a parse error could quote a pan: not shown). */
const describe = (error: { readonly _tag: string }) => {
  if (error instanceof LithicRefused) return `Lithic answered HTTP ${error.status}${error.detail}`
  switch (error._tag) {
    case "RequestError":
      return "Lithic could not be reached"
    case "TimeoutException":
      return `no answer within ${REQUEST_TIMEOUT}`
    default:
      return "Lithic's answer is not the card JSON expected"
  }
}

/** The card's face, when Lithic gave all of it in the documented shapes (expiry as `MM/YY`). */
const face = (card: LithicCard) => {
  const { pan, cvv, exp_month: month, exp_year: year } = card
  if (!pan || !cvv || !month || !year) return Option.none()
  if (
    !/^\d{12,19}$/.test(pan) ||
    !/^\d{3,4}$/.test(cvv) ||
    !/^(0?[1-9]|1[0-2])$/.test(month) ||
    !/^\d{4}$/.test(year)
  ) {
    return Option.none()
  }
  return Option.some({ number: pan, cvv, expiry: `${month.padStart(2, "0")}/${year.slice(-2)}` })
}

const makeLithicIssuer = (settings: LithicSettings) =>
  Effect.gen(function* () {
    const http = yield* HttpClient.HttpClient
    const base = settings.apiUrl.replace(/\/+$/, "")

    /** One call to Lithic's API: its card, or a defect naming the call and why. */
    const call = (what: string, request: HttpClientRequest.HttpClientRequest) =>
      http
        .execute(
          HttpClientRequest.setHeaders(request, {
            authorization: Redacted.value(settings.apiKey),
            accept: "application/json"
          })
        )
        .pipe(
          Effect.flatMap(
            (response): Effect.Effect<LithicCard, LithicRefused | ParseResult.ParseError | ResponseError> =>
              response.status >= 200 && response.status < 300
                ? HttpClientResponse.schemaBodyJson(LithicCard)(response)
                : Effect.flatMap(
                    Effect.orElseSucceed(response.text, () => ""),
                    (text) => new LithicRefused({ status: response.status, detail: refusalDetail(text) })
                  )
          ),
          Effect.scoped,
          Effect.retry({ times: 1, while: retryable }),
          Effect.timeout(REQUEST_TIMEOUT),
          Effect.catchAll((error) => Effect.dieMessage(`Lithic ${what} failed: ${describe(error)}`)),
          Effect.withSpan(`Lithic.${what}`, { attributes: { "card.issuer": "lithic" } })
        )

    const retire = (token: string) =>
      Effect.asVoid(
        call(
          "PATCH /v1/cards/{token}",
          HttpClientRequest.patch(`${base}/v1/cards/${encodeURIComponent(token)}`).pipe(
            HttpClientRequest.bodyUnsafeJson({ state: "CLOSED" })
          )
        )
      )

    return CardIssuer.of({
      name: "lithic",
      issue: ({ address }) =>
        Effect.gen(function* () {
          const card = yield* call(
            "POST /v1/cards",
            HttpClientRequest.post(`${base}/v1/cards`).pipe(
              HttpClientRequest.setHeader("idempotency-key", randomUUID()),
              HttpClientRequest.bodyUnsafeJson({ type: "VIRTUAL", memo: address, state: "OPEN" })
            )
          )
          const issued = face(card)
          if (Option.isNone(issued)) {
            const closed = yield* Effect.exit(retire(card.token))
            return yield* Effect.dieMessage(
              `Lithic issued card ${card.token} without a readable pan, cvv and expiry (Lithic returns the pan ` +
                `only to PCI-compliant programs); ${Exit.isSuccess(closed) ? "it was closed" : "closing it failed too"}`
            )
          }
          return {
            number: Redacted.make(issued.value.number),
            cvv: Redacted.make(issued.value.cvv),
            expiry: issued.value.expiry,
            issuerRef: card.token
          }
        }),
      retire
    })
  })

/** The card issuer with `CARD_NETWORK=lithic`, on its LITHIC_API_KEY and LITHIC_API_URL. */
export const LithicIssuer = Layer.unwrapEffect(
  Effect.gen(function* () {
    const { lithic } = yield* networkSettings
    if (Option.isNone(lithic))
      return yield* Effect.dieMessage("LithicIssuer needs CARD_NETWORK=lithic and its settings")
    return Layer.effect(CardIssuer, makeLithicIssuer(lithic.value))
  })
).pipe(Layer.provide(FetchHttpClient.layer))
