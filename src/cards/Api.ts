import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { Address } from "../chain/Address.js"
import { ApiError, ChainUnavailable } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { pageQuery } from "../http/QueryParams.js"
import { ALLOWANCE_STATES } from "./Allowance.js"
import { Card } from "./Card.js"

export class CardNotFound extends ApiError(
  "CardNotFound",
  "CARD_NOT_FOUND",
  404,
  "No card is issued to the signed-in user (pass the identity check first), or the sandbox network knows no " +
    "such authorization."
) {}

export class AllowanceNotRequested extends ApiError(
  "AllowanceNotRequested",
  "ALLOWANCE_NOT_REQUESTED",
  409,
  "No spending allowance awaits a signature (none requested, its deadline passed, or it was submitted already): " +
    "POST /card/allowance/request first."
) {}

export class AllowanceSignatureInvalid extends ApiError(
  "AllowanceSignatureInvalid",
  "ALLOWANCE_SIGNATURE_INVALID",
  400,
  "The signature is not the card holder's EIP-712 signature of the requested permit."
) {}

export class AllowanceRefused extends ApiError(
  "AllowanceRefused",
  "ALLOWANCE_REFUSED",
  409,
  "The token refused the permit (its nonce was used by another permit, or it expired): request a new one."
) {}

/** A merchant category code (ISO 18245): four digits. */
export const Mcc = Schema.String.pipe(
  Schema.pattern(/^\d{4}$/, { message: () => "must be a merchant category code: four digits, like 5812" })
)

/** A limit in USD: whole cents, from 0 (nothing passes) to 1,000,000,000. */
const UsdLimit = Schema.Number.pipe(
  Schema.filter(
    (usd) =>
      (Number.isFinite(usd) && usd >= 0 && usd <= 1e9 && Math.abs(Math.round(usd * 100) - usd * 100) < 1e-6) ||
      "must be a USD amount from 0 to 1000000000 in whole cents"
  )
)

export class CardControls extends Schema.Class<CardControls>("CardControls")({
  frozen: Schema.Boolean.annotations({ description: "a frozen card declines every authorization (card_frozen)" }),
  frozenReason: Schema.NullOr(Schema.Literal("holder", "amount_owed")).annotations({
    description:
      "holder: the holder froze it (PATCH frozen); amount_owed: the card owes the program (`owedUsd`) and thaws by " +
      "itself once the agent's refill repays it; null: not frozen"
  }),
  owedUsd: Schema.Number.annotations({ description: "what the card owes the program: clearings not debited" }),
  perTransactionUsd: Schema.NullOr(Schema.Number).annotations({ description: "the largest authorization; null: none" }),
  dailyUsd: Schema.NullOr(Schema.Number).annotations({
    description: "approved in a UTC day, at most; null: no limit"
  }),
  monthlyUsd: Schema.NullOr(Schema.Number).annotations({
    description: "approved in a UTC calendar month, at most; null: no limit"
  }),
  blockedMcc: Schema.Array(Mcc).annotations({ description: "merchant category codes the card declines" })
}) {}

export const ControlsUpdate = Schema.Struct({
  frozen: Schema.optional(Schema.Boolean),
  perTransactionUsd: Schema.optional(Schema.NullOr(UsdLimit)),
  dailyUsd: Schema.optional(Schema.NullOr(UsdLimit)),
  monthlyUsd: Schema.optional(Schema.NullOr(UsdLimit)),
  blockedMcc: Schema.optional(Schema.Array(Mcc).pipe(Schema.maxItems(200)))
}).annotations({ identifier: "CardControlsUpdate" })
export type ControlsUpdate = typeof ControlsUpdate.Type

const Uint = Schema.String.pipe(Schema.pattern(/^\d{1,78}$/)).annotations({ description: "uint256, decimal" })

export class PermitTypedData extends Schema.Class<PermitTypedData>("PermitTypedData")({
  typedData: Schema.Struct({
    domain: Schema.Struct({
      name: Schema.String,
      version: Schema.String,
      chainId: Schema.Number,
      verifyingContract: Address
    }),
    types: Schema.Record({
      key: Schema.String,
      value: Schema.Array(Schema.Struct({ name: Schema.String, type: Schema.String }))
    }),
    primaryType: Schema.Literal("Permit"),
    message: Schema.Struct({ owner: Address, spender: Address, value: Uint, nonce: Uint, deadline: Uint })
  }).annotations({
    description:
      "EIP-2612 Permit typed data under the USD1 token's EIP-712 domain, ready for a wallet's signTypedData " +
      "(eth_signTypedData_v4): uint256 values are decimal strings"
  })
}) {}

/** A spending allowance's cap: whole cents, from $0.01 to $1,000,000. */
const CapUsd = Schema.Number.pipe(
  Schema.filter(
    (usd) =>
      (Number.isFinite(usd) && usd >= 0.01 && usd <= 1e6 && Math.abs(Math.round(usd * 100) - usd * 100) < 1e-6) ||
      "must be a USD amount from 0.01 to 1000000 in whole cents"
  )
)

export const AllowanceRequest = Schema.Struct({
  capUsd: CapUsd.annotations({ description: "the most the card program may take from the card wallet, in USD" }),
  validDays: Schema.Number.pipe(
    Schema.filter(
      (days) => (Number.isInteger(days) && days >= 1 && days <= 365) || "must be a whole number of days from 1 to 365"
    )
  ).annotations({ description: "how long the allowance is in force, in days" })
}).annotations({ identifier: "AllowanceRequest" })

export const AllowanceSignature = Schema.Struct({
  signature: Schema.String.pipe(
    Schema.pattern(/^0x[0-9a-fA-F]{130}$/, {
      message: () => "must be a 65-byte signature in hex (0x and 130 hex digits)"
    })
  ).annotations({ description: "the holder's signTypedData signature of the requested permit" })
}).annotations({ identifier: "AllowanceSignature" })

export class AllowanceView extends Schema.Class<AllowanceView>("AllowanceView")({
  state: Schema.Literal(...ALLOWANCE_STATES).annotations({
    description:
      "none: never signed; pending: submitted, not yet seen on chain; active: in force; revoked: the holder set it to " +
      "zero on chain; expired: its deadline passed (the program no longer takes money under it)"
  }),
  capUsd: Schema.Number.annotations({ description: "the cap the holder signed; 0 when none" }),
  usedUsd: Schema.Number.annotations({
    description: "taken already, and committed by open holds and cleared payments not yet debited"
  }),
  remainingUsd: Schema.Number.annotations({ description: "what the next card payments may use; 0 unless active" }),
  deadline: Schema.NullOr(Schema.Number).annotations({ description: "ms since epoch: when it ends; null when none" }),
  spender: Address.annotations({ description: "the card program's settlement account, the permit's spender" }),
  tx: Schema.optional(Schema.String).annotations({ description: "the permit's transaction, once submitted" })
}) {}

export class ActivityItem extends Schema.Class<ActivityItem>("ActivityItem")({
  id: Schema.String.annotations({ description: "cursor for `before`" }),
  type: Schema.Literal("payment", "refill").annotations({
    description: "payment: the card paid a merchant; refill: the agent topped the card up"
  }),
  at: Schema.Number.annotations({ description: "ms since epoch" }),
  usd: Schema.Number.annotations({ description: "positive; `type` says the direction" }),
  description: Schema.String,
  tx: Schema.String
}) {}

export const CardActivityStatus = Schema.Literal("pending", "settled", "reversed", "expired").annotations({
  description:
    "pending: held, or cleared by the network and not yet debited from the card wallet; settled: debited; " +
    "reversed: the merchant released it; expired: the hold lapsed"
})

export const CardMerchant = Schema.Struct({
  name: Schema.String,
  categoryCode: Mcc.annotations({ description: "ISO 18245 merchant category code" }),
  city: Schema.NullOr(Schema.String),
  country: Schema.String
}).annotations({ identifier: "CardMerchant" })

export class CardActivityItem extends Schema.Class<CardActivityItem>("CardActivityItem")({
  id: Schema.String.annotations({ description: "cursor for `before`" }),
  type: Schema.Literal("card_payment", "card_refund").annotations({
    description: "card_payment: the card paid a merchant through the card network; card_refund: a merchant's refund"
  }),
  at: Schema.Number.annotations({ description: "ms since epoch" }),
  usd: Schema.Number.annotations({
    description: "positive; a payment's cleared amount once cleared, else what is held for it"
  }),
  description: Schema.String.annotations({ description: "the merchant's name" }),
  status: CardActivityStatus,
  merchant: CardMerchant,
  tx: Schema.optional(Schema.String).annotations({ description: "the debit's or refund's transaction, once on chain" })
}) {}

/** A statement item: the seed's x402 payments and agent refills, and card payments and refunds. */
export const StatementItem = Schema.Union(ActivityItem, CardActivityItem).annotations({ identifier: "StatementItem" })
export type StatementItem = typeof StatementItem.Type

const ActivityQuery = pageQuery({
  items: "items",
  id: /^[A-Za-z0-9_:-]{1,80}$/,
  idMessage: "must be an item id",
  beforeDescription: "the id of the last item of the previous page: answers the items after it"
})

export class CardApi extends HttpApiGroup.make("card")
  .add(
    HttpApiEndpoint.get("controls", "/card/controls")
      .addSuccess(CardControls)
      .addError(CardNotFound.wire)
      .annotate(OpenApi.Summary, "The card's controls")
      .annotate(
        OpenApi.Description,
        "Whether the card is frozen, its limits in USD and the merchant categories it declines."
      )
  )
  .add(
    HttpApiEndpoint.put("setControls", "/card/controls")
      .setPayload(withFieldMessages(ControlsUpdate))
      .addSuccess(CardControls)
      .addError(CardNotFound.wire)
      .annotate(OpenApi.Summary, "Set the card's controls")
      .annotate(
        OpenApi.Description,
        "Changes the fields given and keeps the others: `frozen`, the per-transaction, daily (UTC day) and monthly " +
          "(UTC month) limits in USD (null removes a limit) and `blockedMcc`, the merchant category codes to decline. " +
          "The next authorization is decided on them."
      )
  )
  .add(
    HttpApiEndpoint.post("replace", "/card/replace")
      .addSuccess(Card)
      .addError(CardNotFound.wire)
      .annotate(OpenApi.Summary, "Replace a lost card")
      .annotate(
        OpenApi.Description,
        "Issues a new number, expiry and CVV for the same card (its balance, controls, strategy and statement stay); " +
          "the old number then declines card_canceled."
      )
  )
  .add(
    HttpApiEndpoint.get("allowance", "/card/allowance")
      .addSuccess(AllowanceView)
      .addError(CardNotFound.wire)
      .annotate(OpenApi.Summary, "The card's spending allowance")
      .annotate(
        OpenApi.Description,
        "What the holder allowed the card program's settlement account to take from the card wallet for card " +
          "payments: its state, cap, what is used (taken, held and cleared) and what remains, its deadline. " +
          "Authorizations decline allowance_missing without an active one, allowance_exceeded past it."
      )
  )
  .add(
    HttpApiEndpoint.post("requestAllowance", "/card/allowance/request")
      .setPayload(withFieldMessages(AllowanceRequest))
      .addSuccess(PermitTypedData)
      .addError(CardNotFound.wire)
      .addError(ChainUnavailable.wire)
      .annotate(OpenApi.Summary, "Ask for a spending allowance to sign")
      .annotate(
        OpenApi.Description,
        "Answers EIP-712 typed data (an EIP-2612 permit of USD1 for the settlement account, capped at `capUsd`, in " +
          "force for `validDays`) for the holder's wallet to sign with signTypedData, once and without gas. " +
          "Then POST /card/allowance with the signature."
      )
  )
  .add(
    HttpApiEndpoint.post("submitAllowance", "/card/allowance")
      .setPayload(withFieldMessages(AllowanceSignature))
      .addSuccess(AllowanceView, { status: 202 })
      .addError(CardNotFound.wire)
      .addError(AllowanceNotRequested.wire)
      .addError(AllowanceSignatureInvalid.wire)
      .addError(AllowanceRefused.wire)
      .addError(ChainUnavailable.wire)
      .annotate(OpenApi.Summary, "Submit the signed spending allowance")
      .annotate(
        OpenApi.Description,
        "Checks that the holder signed the latest requested permit and submits it from the settlement account. " +
          "Answers the allowance, pending until the token is read allowing it (the next block), then active. " +
          "Revoke it at any time on chain with approve(spender, 0)."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Card")
  .annotate(
    OpenApi.Description,
    "The holder's controls over the card: freeze, limits, merchant categories, replacement, and the spending " +
      "allowance card payments are paid under."
  ) {}

export class StatementApi extends HttpApiGroup.make("statement")
  .add(
    HttpApiEndpoint.get("activity", "/me/activity")
      .setUrlParams(withFieldMessages(ActivityQuery))
      .addSuccess(Schema.Array(StatementItem))
      .annotate(OpenApi.Summary, "Card statement")
      .annotate(
        OpenApi.Description,
        "The card statement, newest first: x402 payments, agent refills, card payments at merchants (pending, " +
          "settled, reversed or expired, with the merchant) and card refunds. `?limit=` (1-200, default 50), " +
          "`?before=<id>` for the page after the item with that id."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Card statement")
  .annotate(
    OpenApi.Description,
    "What moved on the signed-in user's card: settled x402 payments, the agent's executed refills, and card payments " +
      "and refunds from the card network."
  ) {}
