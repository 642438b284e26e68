/**
 * Card authorizations over HTTP: the endpoint the card network calls (signed, no bearer token), the
 * holder's list of authorizations, and the sandbox network with its terminal (served only while the
 * sandbox network is the card network).
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { CardMerchant, CardNotFound, Mcc } from "../cards/Api.js"
import { ApiError, RateLimited } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { pageQuery } from "../http/QueryParams.js"
import { DECLINE_REASONS } from "./Decide.js"

export class NetworkSignatureRejected extends ApiError(
  "NetworkSignatureRejected",
  "NETWORK_SIGNATURE_INVALID",
  401,
  "The card network's signature headers are missing, do not match the raw body, or are more than 5 minutes " +
    "from now (a replay); nothing was stored."
) {}

export class NetworkMessageRejected extends ApiError(
  "NetworkMessageRejected",
  "NETWORK_MESSAGE_MALFORMED",
  400,
  "A signed card-network message this service cannot read; nothing was stored."
) {}

export const DeclineReason = Schema.Literal(...DECLINE_REASONS).annotations({
  identifier: "DeclineReason",
  description:
    "insufficient_funds: the card wallet's USD1 less holds and cleared amounts is below the amount; card_frozen: the " +
    "holder froze the card; card_canceled: a replaced (lost) card; card_expired: past its expiry; limit_exceeded: a " +
    "per-transaction, daily or monthly limit; merchant_category_blocked: the holder blocked this merchant category; " +
    "funds_unknown: the wallet's balance is older than CARD_BALANCE_MAX_AGE; allowance_missing: no active spending " +
    "allowance (none signed, not yet on chain, revoked or expired: GET /card/allowance); allowance_exceeded: the " +
    "amount is more than the spending allowance leaves; stand_in: not decided within the budget " +
    "(CARD_AUTHORIZATION_BUDGET), the configured stand-in answer"
})

export const AuthorizationStatus = Schema.Literal("declined", "pending", "settled", "reversed", "expired").annotations({
  description:
    "declined; pending: held or cleared and not yet debited from the wallet; settled: the wallet was debited; " +
    "reversed: the merchant released the whole hold; expired: the hold expired (CARD_HOLD_TTL) or the network expired it"
})

export class CardAuthorization extends Schema.Class<CardAuthorization>("CardAuthorization")({
  id: Schema.String.annotations({ description: "the network's authorization id; the cursor for `before`" }),
  at: Schema.Number.annotations({ description: "ms since epoch" }),
  amountUsd: Schema.Number.annotations({ description: "the amount authorized (approved) or asked for (declined)" }),
  approved: Schema.Boolean,
  reason: Schema.optional(DeclineReason),
  status: AuthorizationStatus,
  heldUsd: Schema.Number.annotations({ description: "what is still held on the card for it" }),
  clearedUsd: Schema.Number.annotations({ description: "what the network cleared (settled with the merchant) so far" }),
  availableUsd: Schema.NullOr(Schema.Number).annotations({
    description: "the funds available right after the decision; null when they were not known"
  }),
  merchant: CardMerchant,
  channel: Schema.Literal("in_person", "online")
}) {}

export class CardMoney extends Schema.Class<CardMoney>("CardMoney")({
  change: Schema.Literal("debited", "credited", "owed", "repaid").annotations({
    description:
      "debited: a clearing's USD1 was taken from the card wallet under its spending allowance; credited: a refund " +
      "was sent back to it; owed: a clearing could not be debited (the wallet or the allowance fell short), the card " +
      "owes it and is frozen (amount_owed) until it is repaid; repaid: the agent's refill paid what was owed back"
  }),
  amountUsd: Schema.Number,
  authorizationId: Schema.NullOr(Schema.String).annotations({
    description: "the authorization a clearing belongs to (null for a refund, a force post or a repayment)"
  }),
  eventId: Schema.NullOr(Schema.String).annotations({ description: "the card network's event (clearing or refund)" }),
  tx: Schema.NullOr(Schema.String).annotations({ description: "the transaction that moved the USD1" }),
  owedUsd: Schema.Number.annotations({ description: "what the card owes the program after this change" })
}) {}

const AuthorizationsQuery = pageQuery({
  items: "authorizations",
  id: /^[A-Za-z0-9_:.-]{1,100}$/,
  idMessage: "must be an authorization id",
  beforeDescription: "the id of the last authorization of the previous page: answers the ones before it"
})

export class AuthorizationsApi extends HttpApiGroup.make("authorizations")
  .add(
    HttpApiEndpoint.get("list", "/card/authorizations")
      .setUrlParams(withFieldMessages(AuthorizationsQuery))
      .addSuccess(Schema.Array(CardAuthorization))
      .addError(CardNotFound.wire)
      .annotate(OpenApi.Summary, "The card's authorizations")
      .annotate(
        OpenApi.Description,
        "Every authorization the card network asked about, approved or declined, newest first, with its decline " +
          "reason, merchant and what is held and cleared. `?limit=` (1-200, default 50), `?before=<id>` for the next page."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Card authorizations")
  .annotate(
    OpenApi.Description,
    "What the card network asked the issuer: each payment at a merchant, decided in real time from the card's " +
      "state, the holder's controls and the funds in the card wallet (docs/cards.md)."
  ) {}

/** The raw body is verified and read by the network's adapter; this is its shape for the document. */
const NetworkMessageDoc = Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
  identifier: "CardNetworkMessage",
  jsonSchema: {
    type: "object",
    description:
      "Lithic's Auth Stream Access request (`card_authorization.approval_request`) or Events API webhook " +
      "(`card_transaction.updated`), signed with Standard Webhooks headers (see docs/cards.md)"
  }
})

const NetworkAnswer = Schema.Record({ key: Schema.String, value: Schema.Unknown }).annotations({
  identifier: "CardNetworkAnswer",
  jsonSchema: {
    type: "object",
    description:
      "To an authorization request: Lithic's ASA response `{token, result}` (`result` APPROVED or a " +
      "decline code); to a transaction update: `{received: true}`"
  }
})

export class CardNetworkApi extends HttpApiGroup.make("cardNetwork")
  .add(
    HttpApiEndpoint.post("message", "/card-network/messages")
      .setPayload(NetworkMessageDoc)
      .addSuccess(NetworkAnswer)
      .addError(NetworkSignatureRejected.wire)
      .addError(NetworkMessageRejected.wire)
      .annotate(OpenApi.Summary, "Receive the card network's messages")
      .annotate(
        OpenApi.Description,
        "Called by the card processor, not by the app: authorization requests, answered within " +
          "CARD_AUTHORIZATION_BUDGET (else the stand-in answer), and the transaction's later events (increments, " +
          "reversals, clearings, refunds, expiries). Authenticated by the webhook-id, webhook-timestamp and " +
          "webhook-signature headers over the raw body, within 5 minutes; each message counts once."
      )
  )
  .annotate(OpenApi.Title, "Card network")
  .annotate(
    OpenApi.Description,
    "The card processor's real-time authorization stream and transaction events (Lithic's wire format; the " +
      "sandbox network speaks it too)."
  ) {}

// -------------------------------------------------------------------------------------------------
// The sandbox network

/** A USD amount on a card: a decimal string with at most two decimals, above 0 and at most 1,000,000. */
export const CardAmount = Schema.String.pipe(
  Schema.pattern(/^\d{1,7}(\.\d{1,2})?$/, {
    message: () => 'must be a USD amount with at most 2 decimals, like "12.50"'
  }),
  Schema.filter((text) => {
    const value = Number(text)
    return (value > 0 && value <= 1_000_000) || "must be above 0 and at most 1000000"
  })
)

const SandboxMerchant = Schema.Struct({
  name: Schema.String.pipe(
    Schema.pattern(/^[^\p{Cc}]{1,25}$/u, { message: () => "must be 1 to 25 printable characters" })
  ),
  mcc: Mcc,
  country: Schema.String.pipe(
    Schema.pattern(/^[A-Z]{2,3}$/, { message: () => "must be an ISO 3166-1 code in capitals, like USA" })
  ),
  city: Schema.optional(
    Schema.String.pipe(Schema.pattern(/^[^\p{Cc}]{1,40}$/u, { message: () => "must be 1 to 40 printable characters" }))
  )
})

export const SandboxSwipe = Schema.Struct({
  cardNumber: Schema.String.pipe(Schema.pattern(/^\d{12,19}$/, { message: () => "must be 12 to 19 digits" })),
  expiry: Schema.String.pipe(
    Schema.pattern(/^(0[1-9]|1[0-2])\/\d{2}$/, { message: () => "must be the card's expiry as MM/YY" })
  ),
  cvv: Schema.String.pipe(Schema.pattern(/^\d{3,4}$/, { message: () => "must be 3 or 4 digits" })),
  amountUsd: CardAmount,
  merchant: SandboxMerchant,
  channel: Schema.optional(Schema.Literal("in_person", "online"))
}).annotations({ identifier: "SandboxSwipe" })
export type SandboxSwipe = typeof SandboxSwipe.Type

export const SandboxAnswer = Schema.Struct({
  id: Schema.String.annotations({ description: "the network's authorization id" }),
  approved: Schema.Boolean,
  reason: Schema.optional(
    Schema.Union(DeclineReason, Schema.Literal("card_verification_failed")).annotations({
      description:
        "why it was declined: card_verification_failed when the number, expiry or CVV do not match an issued card " +
        "(the issuer is not asked), else the issuer's reason"
    })
  )
}).annotations({ identifier: "SandboxAuthorization" })

const SandboxId = Schema.Struct({
  id: Schema.String.pipe(Schema.pattern(/^[0-9a-f-]{36}$/, { message: () => "must be an authorization id" }))
})

const OptionalAmount = Schema.Struct({ amountUsd: Schema.optional(CardAmount) })
const RequiredAmount = Schema.Struct({ amountUsd: CardAmount })

const lifecycle = <const Name extends string, const Path extends `/${string}`>(name: Name, path: Path, about: string) =>
  HttpApiEndpoint.post(name, `/sandbox/card-network/authorizations/:id/${path.slice(1)}` as const)
    .setPath(withFieldMessages(SandboxId))
    .addSuccess(CardAuthorization)
    .addError(CardNotFound.wire)
    .addError(RateLimited.wire)
    .annotate(OpenApi.Summary, about)

export class CardSandboxApi extends HttpApiGroup.make("cardSandbox")
  .add(
    HttpApiEndpoint.post("authorize", "/sandbox/card-network/authorizations")
      .setPayload(withFieldMessages(SandboxSwipe))
      .addSuccess(SandboxAnswer)
      .addError(RateLimited.wire)
      .annotate(OpenApi.Summary, "Swipe a card (sandbox network)")
      .annotate(
        OpenApi.Description,
        "Plays the card network and a merchant's terminal: checks the number, expiry and CVV against the issued " +
          "cards (a mismatch declines card_verification_failed without asking the issuer), then sends the signed " +
          "authorization request to this service's card-network endpoint and reports the issuer's answer."
      )
  )
  .add(
    HttpApiEndpoint.post("increment", "/sandbox/card-network/authorizations/:id/increment")
      .setPath(withFieldMessages(SandboxId))
      .setPayload(withFieldMessages(RequiredAmount))
      .addSuccess(SandboxAnswer)
      .addError(CardNotFound.wire)
      .addError(RateLimited.wire)
      .annotate(OpenApi.Summary, "Increment an authorization (sandbox network)")
      .annotate(
        OpenApi.Description,
        "Asks the issuer to raise the authorization by `amountUsd`: its answer, like a swipe's."
      )
  )
  .add(
    lifecycle("reverse", "/reverse", "Reverse an authorization (sandbox network)")
      .setPayload(withFieldMessages(OptionalAmount))
      .annotate(OpenApi.Description, "Releases `amountUsd` of the hold, or all of it when absent.")
  )
  .add(
    lifecycle("clear", "/clear", "Clear an authorization (sandbox network)")
      .setPayload(withFieldMessages(OptionalAmount))
      .annotate(
        OpenApi.Description,
        "The merchant's clearing: `amountUsd` (the held amount when absent; more for a tip, less for fuel) is " +
          "settled by the network and becomes debit pending; the hold is released."
      )
  )
  .add(
    lifecycle("refund", "/refund", "Refund to the card (sandbox network)")
      .setPayload(withFieldMessages(RequiredAmount))
      .annotate(OpenApi.Description, "The merchant's refund of `amountUsd` to the card, as a return.")
  )
  .add(
    lifecycle("expire", "/expire", "Expire an authorization (sandbox network)").annotate(
      OpenApi.Description,
      "The network expires the authorization: its whole hold is released."
    )
  )
  .annotate(OpenApi.Title, "Sandbox card network")
  .annotate(
    OpenApi.Description,
    "Only while the sandbox network is the card network (CARD_NETWORK=sandbox, the default): it plays the network " +
      "and a merchant's terminal, with no bearer token, rate limited per client (RATE_LIMIT_CARD_SANDBOX a minute). " +
      "Every swipe runs the production path: a signed Lithic-format request to POST /card-network/messages. The web " +
      "app's terminal (/app/terminal) calls it."
  ) {}
