/**
 * Lithic's wire format, both ways: the Auth Stream Access (ASA) request it POSTs for each
 * authorization and the answer it expects, and the Events API's `card_transaction.updated` webhook
 * that carries the rest of a transaction's life. Pure: schemas, decoding to the port's messages, and
 * encoding them (the sandbox network sends what Lithic would). docs/cards.md names the sources.
 *
 * Where Lithic's documentation is silent, the reading is ours and stated here and in docs/cards.md:
 * - an ASA request whose `token` names an authorization already decided is an incremental
 *   authorization, and its amount is the increment (as in ISO 8583 incremental authorizations);
 * - an `AUTHORIZATION_ADVICE` event sets the authorization's amount to the event's amount;
 * - a transaction whose `status` is `SETTLED` after a clearing holds nothing any more.
 * Amounts are cents on the wire (credits may be negative) and millionths of a dollar inside.
 */
import { randomUUID } from "node:crypto"
import { Either, ParseResult, Schema } from "effect"
import type {
  AuthorizationRequest,
  Channel,
  LifecycleEvent,
  Merchant,
  NetworkMessage,
  Outcome,
  TransactionUpdate
} from "./CardNetwork.js"
import type { DeclineReason } from "./Decide.js"

const MICROS_PER_CENT = 10_000n

export const centsToMicros = (cents: number): bigint => BigInt(Math.abs(Math.trunc(cents))) * MICROS_PER_CENT

const Cents = Schema.Number.pipe(Schema.int(), Schema.between(-1e12, 1e12))
const Token = Schema.String.pipe(Schema.minLength(1), Schema.maxLength(100))
const Text = Schema.String.pipe(Schema.maxLength(200))

const WireMerchant = Schema.Struct({
  descriptor: Text,
  mcc: Schema.String.pipe(Schema.pattern(/^\d{4}$/, { message: () => "merchant.mcc must be four digits" })),
  city: Schema.optional(Schema.NullOr(Text)),
  country: Schema.String.pipe(Schema.pattern(/^[A-Z]{2,3}$/, { message: () => "merchant.country must be ISO 3166-1" })),
  state: Schema.optional(Schema.NullOr(Text)),
  acceptor_id: Schema.optional(Schema.NullOr(Text))
})

const Amount = Schema.Struct({ amount: Cents, currency: Schema.optional(Schema.String) })

/** The fields of an ASA request this service reads (Lithic's `CardAuthorization`); the rest pass by. */
export const AsaRequest = Schema.Struct({
  event_type: Schema.optional(Schema.Literal("card_authorization.approval_request")),
  token: Token,
  status: Schema.optional(Schema.String),
  created: Schema.optional(Schema.String),
  amount: Schema.optional(Cents),
  amounts: Schema.optional(Schema.Struct({ cardholder: Amount, hold: Schema.optional(Schema.NullOr(Amount)) })),
  card: Schema.Struct({ token: Token, last_four: Schema.optional(Schema.String) }),
  merchant: WireMerchant,
  pos: Schema.optional(
    Schema.Struct({
      entry_mode: Schema.optional(Schema.Struct({ card: Schema.optional(Schema.String) }))
    })
  )
})
export type AsaRequest = typeof AsaRequest.Type

const EventType = Schema.String
const WireEvent = Schema.Struct({
  token: Token,
  type: EventType,
  amount: Schema.optional(Cents),
  amounts: Schema.optional(Schema.Struct({ cardholder: Amount })),
  created: Schema.optional(Schema.String)
})

/** The Events API's `card_transaction.updated`: the whole transaction with its events. */
export const TransactionUpdated = Schema.Struct({
  event_type: Schema.Literal("card_transaction.updated"),
  token: Token,
  card_token: Token,
  status: Schema.String,
  merchant: WireMerchant,
  events: Schema.Array(WireEvent).pipe(Schema.maxItems(1000))
})
export type TransactionUpdated = typeof TransactionUpdated.Type

const decodeUpdate = Schema.decodeUnknownEither(TransactionUpdated, { errors: "first" })
const decodeAsa = Schema.decodeUnknownEither(AsaRequest, { errors: "first" })

/** The first problem of a body, as `path: what` (the union's whole signature would say nothing). */
const firstIssue = (error: ParseResult.ParseError) => {
  const [issue] = ParseResult.ArrayFormatter.formatErrorSync(error)
  return issue === undefined ? "unreadable" : `${issue.path.join(".") || "body"}: ${issue.message}`
}

/** The body as the message its `event_type` names: an Events API transaction update, else an ASA request. */
const decodeInbound = (body: string): Either.Either<TransactionUpdated | AsaRequest, string> => {
  let json: unknown
  try {
    json = JSON.parse(body)
  } catch {
    return Either.left("the body is not JSON")
  }
  if (typeof json !== "object" || json === null || Array.isArray(json))
    return Either.left("the body is not a JSON object")
  const isUpdate = (json as { readonly event_type?: unknown }).event_type === "card_transaction.updated"
  return isUpdate ? Either.mapLeft(decodeUpdate(json), firstIssue) : Either.mapLeft(decodeAsa(json), firstIssue)
}

const merchantOf = (wire: typeof WireMerchant.Type): Merchant => ({
  name: wire.descriptor.trim(),
  mcc: wire.mcc,
  city: wire.city?.trim() || null,
  country: wire.country
})

/** What to hold: Lithic's `hold` amount where it has one (it may exceed the cardholder's for fuel and tips). */
const cardholderCents = (message: {
  readonly amount?: number | undefined
  readonly amounts?:
    | {
        readonly cardholder: { readonly amount: number }
        readonly hold?: { readonly amount: number } | null | undefined
      }
    | undefined
}) => message.amounts?.hold?.amount ?? message.amounts?.cardholder.amount ?? message.amount

/** What a lifecycle event means here; none for the events an ASA answer already decided or that move nothing. */
const lifecycleType = (type: string): LifecycleEvent["type"] | undefined => {
  switch (type) {
    case "AUTHORIZATION_ADVICE":
      return "adjustment"
    case "AUTHORIZATION_REVERSAL":
      return "reversal"
    case "AUTHORIZATION_EXPIRY":
      return "expiry"
    case "CLEARING":
      return "clearing"
    case "RETURN":
    case "FINANCIAL_CREDIT_AUTHORIZATION":
      return "refund"
    default:
      return undefined
  }
}

/** Reads a verified body: an ASA request or a transaction update; the reason when it is not one. */
export const readMessage = (body: string, messageId: string): Either.Either<NetworkMessage, string> =>
  Either.flatMap(decodeInbound(body), (wire): Either.Either<NetworkMessage, string> => {
    if ("event_type" in wire && wire.event_type === "card_transaction.updated") {
      const events = wire.events.flatMap((event): ReadonlyArray<LifecycleEvent> => {
        const type = lifecycleType(event.type)
        const cents = cardholderCents(event) ?? 0
        return type === undefined ? [] : [{ id: event.token, type, amount: centsToMicros(cents) }]
      })
      const update: TransactionUpdate = {
        kind: "update",
        messageId,
        authorizationId: wire.token,
        cardToken: wire.card_token,
        merchant: merchantOf(wire.merchant),
        settled: wire.status === "SETTLED",
        events
      }
      return Either.right(update)
    }
    const asa = wire as AsaRequest
    const cents = cardholderCents(asa)
    if (cents === undefined) return Either.left("the request carries no amount")
    if (asa.status !== undefined && !["AUTHORIZATION", "FINANCIAL_AUTHORIZATION"].includes(asa.status)) {
      return Either.left(`status ${asa.status} is not an authorization this issuer decides`)
    }
    const request: AuthorizationRequest = {
      kind: "authorization",
      messageId,
      authorizationId: asa.token,
      cardToken: asa.card.token,
      amount: centsToMicros(cents),
      merchant: merchantOf(asa.merchant),
      channel: asa.pos?.entry_mode?.card === "NOT_PRESENT" ? "online" : "in_person"
    }
    return Either.right(request)
  })

/** Lithic's ASA result for a decline reason: the closest of its fixed codes (any but APPROVED declines). */
export const asaResult = (reason: DeclineReason | null): string => {
  switch (reason) {
    case null:
      return "APPROVED"
    case "card_frozen":
    case "card_canceled":
    case "card_expired":
      return "CARD_PAUSED"
    case "limit_exceeded":
      return "VELOCITY_EXCEEDED"
    case "merchant_category_blocked":
      return "UNAUTHORIZED_MERCHANT"
    case "insufficient_funds":
    case "funds_unknown":
    case "allowance_missing":
    case "allowance_exceeded":
    case "stand_in":
      return "INSUFFICIENT_FUNDS"
  }
}

/**
 * The ASA response body: the request's token and the result. No `balance`: a re-delivered request
 * gets the stored answer, byte for byte, and the balance at the first answer is not stored.
 */
export const asaResponse = (request: AuthorizationRequest, outcome: Outcome) => ({
  token: request.authorizationId,
  result: asaResult(outcome.approved ? null : outcome.reason)
})

export const AsaResponse = Schema.Struct({ token: Schema.String, result: Schema.String })

// -------------------------------------------------------------------------------------------------
// What the sandbox network sends, as Lithic sends it

export interface SandboxCard {
  readonly token: string
  readonly lastFour: string
}

/** A merchant as Lithic's `Merchant` types it: every field present, `city` and `state` strings ("" when unknown). */
const wireMerchant = (merchant: Merchant) => ({
  acceptor_id: "SANDBOX0000001",
  acquiring_institution_id: "000000",
  city: merchant.city ?? "",
  country: merchant.country,
  descriptor: merchant.name,
  mcc: merchant.mcc,
  state: "",
  phone_number: null,
  postal_code: null,
  street_address: null
})

/** An ASA request in Lithic's current format, with every field its `CardAuthorization` requires. */
export const asaRequestBody = (input: {
  readonly token: string
  readonly card: SandboxCard
  readonly cents: number
  readonly merchant: Merchant
  readonly channel: Channel
  readonly created: Date
}) => {
  const money = { amount: input.cents, currency: "USD" }
  const present = input.channel === "in_person"
  return {
    event_type: "card_authorization.approval_request",
    token: input.token,
    status: "AUTHORIZATION",
    created: input.created.toISOString().replace(/\.\d{3}Z$/, "Z"),
    transaction_initiator: "CARDHOLDER",
    network: "VISA",
    acquirer_fee: 0,
    amount: input.cents,
    authorization_amount: input.cents,
    settled_amount: 0,
    cash_amount: 0,
    cardholder_currency: "USD",
    merchant_amount: input.cents,
    merchant_currency: "USD",
    amounts: {
      cardholder: { ...money, conversion_rate: "1.000000" },
      hold: money,
      merchant: money,
      settlement: null
    },
    avs: { address: "", zipcode: "", address_on_file_match: "NOT_PRESENT" },
    card: {
      token: input.card.token,
      last_four: input.card.lastFour,
      memo: "",
      spend_limit: 0,
      spend_limit_duration: "TRANSACTION",
      state: "OPEN",
      type: "VIRTUAL"
    },
    merchant: wireMerchant(input.merchant),
    pos: {
      entry_mode: {
        card: present ? "PRESENT" : "NOT_PRESENT",
        cardholder: present ? "PRESENT" : "NOT_PRESENT",
        pan: present ? "CONTACTLESS" : "ECOMMERCE",
        pin_entered: false
      },
      terminal: {
        attended: present,
        card_retention_capable: false,
        on_premise: present,
        operator: present ? "CARDHOLDER" : "UNKNOWN",
        partial_approval_capable: false,
        pin_capability: "NOT_CAPABLE",
        type: present ? "POS" : "ECOMMERCE"
      }
    },
    name_validation: null,
    service_location: null,
    token_info: null
  }
}

/** The Lithic event type of a lifecycle event the sandbox sends. */
const wireEventType: Record<LifecycleEvent["type"], string> = {
  adjustment: "AUTHORIZATION_ADVICE",
  reversal: "AUTHORIZATION_REVERSAL",
  expiry: "AUTHORIZATION_EXPIRY",
  clearing: "CLEARING",
  refund: "RETURN"
}

/** A `card_transaction.updated` webhook body for a transaction and its events so far. */
export const transactionUpdatedBody = (input: {
  readonly token: string
  readonly cardToken: string
  readonly status: "PENDING" | "SETTLED" | "VOIDED" | "EXPIRED"
  readonly merchant: Merchant
  readonly events: ReadonlyArray<{ readonly id: string; readonly type: LifecycleEvent["type"]; readonly cents: number }>
  readonly at: Date
}) => {
  const created = input.at.toISOString().replace(/\.\d{3}Z$/, "Z")
  return {
    event_type: "card_transaction.updated",
    token: input.token,
    card_token: input.cardToken,
    status: input.status,
    result: "APPROVED",
    created,
    updated: created,
    merchant: wireMerchant(input.merchant),
    events: input.events.map((event) => {
      const credit = event.type === "refund"
      const money = { amount: credit ? -event.cents : event.cents, currency: "USD" }
      return {
        token: event.id,
        type: wireEventType[event.type],
        amount: money.amount,
        amounts: { cardholder: { ...money, conversion_rate: "1.000000" }, merchant: money, settlement: null },
        created,
        detailed_results: ["APPROVED"],
        effective_polarity: credit ? "CREDIT" : "DEBIT",
        result: "APPROVED",
        rule_results: []
      }
    })
  }
}

/** A new network id, as Lithic's (a UUID). */
export const networkToken = (): string => randomUUID()
