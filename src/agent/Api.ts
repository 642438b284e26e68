/**
 * The agent over HTTP: the strategy (always served, bearer), and the portfolio, decision preview,
 * decision log and wallet session (served when `AGENT_MODE` is `dry` or `live`). The latter need
 * no token: without one the first three describe the card an operator made public
 * (`AGENT_PUBLIC_CARD`), or answer 401 when none is; with a valid bearer token they describe the
 * caller's own; an invalid token is 401.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, OpenApi } from "@effect/platform"
import { Context, type Option, Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { Address } from "../chain/Address.js"
import { ApiError, BadRequest, ChainUnavailable, Unauthorized } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { pageQuery } from "../http/QueryParams.js"
import { AtQuery, MarketData, PriceUnavailable } from "../market/Api.js"

export class CardRequired extends ApiError(
  "CardRequired",
  "CARD_REQUIRED",
  403,
  "The agent serves cards: pass the identity check first."
) {}

export class UnknownToken extends ApiError(
  "UnknownToken",
  "UNKNOWN_TOKEN",
  400,
  "A strategy target is not a known stock token (symbol or address)."
) {}

// 409, not 404: on the agent's paths a 404 means only that the agent is off (AGENT_MODE).
export class NoAgentAccount extends ApiError(
  "NoAgentAccount",
  "NO_AGENT_ACCOUNT",
  409,
  "Without a bearer token these describe the card an operator made public (AGENT_PUBLIC_CARD), and it names no " +
    "card. Send a bearer token to read your own."
) {}

export class StrategyNotFound extends ApiError(
  "StrategyNotFound",
  "STRATEGY_NOT_FOUND",
  404,
  "The card has no strategy yet: PUT /strategy sets one."
) {}

export class SessionExpired extends ApiError(
  "SessionExpired",
  "SESSION_EXPIRED",
  502,
  "The agent wallet needs a new sign-in in the exchange app."
) {}

export class NotLoggedIn extends ApiError(
  "NotLoggedIn",
  "NOT_LOGGED_IN",
  502,
  "The agent wallet is not signed in to the exchange app."
) {}

export class AgentWalletFailed extends ApiError(
  "AgentWalletFailed",
  "AGENT_WALLET_ERROR",
  502,
  "The agent wallet failed or did not answer in time."
) {}

export { ChainUnavailable }

/** Whose agent account a request describes: the signed-in caller's, or none for the public card. */
export class Viewer extends Context.Tag("app/Viewer")<Viewer, Option.Option<Address>>() {}

/** Reads an optional bearer token: absent is the public card (401 when none is), invalid is 401 (never a fallback). */
export class OptionalAuthentication extends HttpApiMiddleware.Tag<OptionalAuthentication>()(
  "app/OptionalAuthentication",
  { failure: Unauthorized.wire, provides: Viewer }
) {}

const Weight = Schema.Number.pipe(Schema.finite())

export const StrategyBody = Schema.Struct({
  targets: Schema.Record({ key: Schema.String, value: Weight }).annotations({
    description: "target weight per token (symbol or token address), each in (0, 1], summing to 1 (±0.001)"
  }),
  weeklySpendUsd: Schema.Number.pipe(Schema.finite()).annotations({ description: "0 to 100000" }),
  timeZone: Schema.optional(Schema.String).annotations({
    description: "IANA time zone of the weekday/weekend spending buckets; default America/New_York"
  })
})

export class Strategy extends Schema.Class<Strategy>("Strategy")({
  targets: Schema.Record({ key: Schema.String, value: Schema.Number }).annotations({
    description: "target weight per token symbol"
  }),
  weeklySpendUsd: Schema.Number,
  timeZone: Schema.String,
  updatedAt: Schema.Number.annotations({ description: "ms since epoch" })
}) {}

export const Holding = Schema.Struct({
  symbol: Schema.String,
  address: Address,
  balance: Schema.String.annotations({ description: "whole-token units, decimal" }),
  valueUsd: Schema.Number,
  weight: Schema.Number.annotations({ description: "valueUsd / totalUsd, 0 to 1" }),
  target: Schema.Number.annotations({ description: "the strategy's weight, 0 to 1" }),
  market: Schema.NullOr(MarketData).annotations({ description: "null for the wallet's USD1 cash" })
}).annotations({ identifier: "Holding" })

export class Portfolio extends Schema.Class<Portfolio>("Portfolio")({
  wallet: Address.annotations({ description: "the agent wallet's address (beyond the seed)" }),
  card: Schema.Struct({
    address: Address,
    usd1: Schema.Number.annotations({ description: "the card's own USD1 balance" })
  }),
  totalUsd: Schema.Number.annotations({ description: "the agent wallet's value: its tokens and its USD1 cash" }),
  holdings: Schema.Array(Holding)
}) {}

export const DecisionAction = Schema.Literal("none", "refill", "hold", "rebalance")

// The fields the four decision shapes share, described once.
const decisionReason = Schema.String.annotations({
  description: "for the card holder: what the agent does and why, amounts in dollars, instants in New York time"
})
const needUsd = Schema.Number.annotations({
  description: "the card's forecast spend until `horizon` × 1.2, USD, rounded up to the cent"
})
const horizon = Schema.Number.annotations({
  description:
    "end of the forecast window, ms since epoch: the next open after the coming close while the regular session " +
    "is open, else the next open"
})
const soldSymbol = Schema.String.annotations({
  description: "the position sold: a token's symbol, or USD1 for the agent wallet's cash (nothing is sold then)"
})
const soldSpread = Schema.Number.annotations({
  description:
    "the sold position's spreadVsClose (0.004: 0.4% above its close reference); 0 for USD1 cash, and for a " +
    "token without a close reference, which is sold only in the regular session, where its price is its own reference"
})

export const NoneDecision = Schema.Struct({
  action: Schema.Literal("none"),
  rule: Schema.Literal(
    "ENOUGH_BALANCE",
    "OUTSIDE_CLOSE_WINDOW",
    "OUTSIDE_REGULAR_SESSION",
    "REBALANCE_BLOCKED",
    "NO_STRATEGY"
  ).annotations({ description: "why nothing is done (docs/agent.md lists each rule)" }),
  reason: decisionReason,
  needUsd,
  horizon
}).annotations({
  identifier: "NoneDecision",
  description:
    "Nothing to do now (NO_STRATEGY: the card has no strategy; its need is forecast from its own payments). " +
    "Nothing is traded, so usd, symbol, buySymbol and spread are absent."
})
export type NoneDecision = typeof NoneDecision.Type

export const RefillDecision = Schema.Struct({
  action: Schema.Literal("refill"),
  rule: Schema.Literal(
    "REFILL_BEFORE_CLOSE",
    "REFILL_BELOW_FLOOR",
    "REFILL_BELOW_FLOOR_OUTSIDE_REGULAR",
    "REPAY_OWED"
  ).annotations({
    description: "which refill rule applies (docs/agent.md)"
  }),
  reason: decisionReason,
  usd: Schema.Number.annotations({
    description:
      "USD1 the refill moves, rounded up to the cent: repayUsd to the card program first, the rest to the card"
  }),
  repayUsd: Schema.Number.annotations({
    description:
      "the part of usd that repays what the card owes the card program (exactly that, to the millionth; 0 when it " +
      "owes nothing), sent to the program's settlement account before the rest goes to the card"
  }),
  symbol: soldSymbol,
  spread: soldSpread,
  needUsd,
  horizon
}).annotations({
  identifier: "RefillDecision",
  description:
    "USD1 sent to the card, from the agent wallet's cash or from the sale of one token. Nothing is bought, so " +
    "buySymbol is absent."
})
export type RefillDecision = typeof RefillDecision.Type

export const HoldDecision = Schema.Struct({
  action: Schema.Literal("hold"),
  rule: Schema.Literal("NOTHING_TO_SELL", "NOT_TRADING", "SPREAD_GUARD", "POSITION_TOO_SMALL").annotations({
    description: "what blocks the refill (docs/agent.md)"
  }),
  reason: decisionReason,
  usd: Schema.Number.annotations({ description: "the refill that is due but cannot be made now, USD" }),
  needUsd,
  horizon
}).annotations({
  identifier: "HoldDecision",
  description:
    "A refill is due but cannot be made now; the reason names what blocks it and when the market allows it. " +
    "Nothing is sold, so symbol, buySymbol and spread are absent."
})
export type HoldDecision = typeof HoldDecision.Type

export const RebalanceDecision = Schema.Struct({
  action: Schema.Literal("rebalance"),
  rule: Schema.Literal("REBALANCE_DRIFT").annotations({ description: "a weight is more than 5 points off target" }),
  reason: decisionReason,
  usd: Schema.Number.annotations({ description: "USD value sold and bought, rounded down to the cent" }),
  symbol: soldSymbol,
  buySymbol: Schema.String.annotations({ description: "the token bought" }),
  spread: soldSpread,
  needUsd,
  horizon
}).annotations({
  identifier: "RebalanceDecision",
  description: "A trade from the most overweight position to the most underweight token, in the regular session."
})
export type RebalanceDecision = typeof RebalanceDecision.Type

/** What the agent decides: one shape per action, every field of a shape always present. */
export const Decision = Schema.Union(NoneDecision, RefillDecision, HoldDecision, RebalanceDecision).annotations({
  identifier: "Decision",
  jsonSchema: {
    discriminator: {
      propertyName: "action",
      mapping: {
        none: "#/components/schemas/NoneDecision",
        refill: "#/components/schemas/RefillDecision",
        hold: "#/components/schemas/HoldDecision",
        rebalance: "#/components/schemas/RebalanceDecision"
      }
    }
  }
})
export type Decision = typeof Decision.Type

export class Preview extends Schema.Class<Preview>("Preview")({
  at: Schema.Number.annotations({ description: "the instant decided for, ms since epoch" }),
  mode: Schema.Literal("dry", "live"),
  decision: Decision
}) {}

export const DecisionStatus = Schema.Literal(
  "logged",
  "dry-run",
  "executing",
  "executed",
  "failed",
  "unknown",
  "blocked"
)

export const DecisionItem = Schema.Struct({
  id: Schema.String.annotations({ description: "cursor for `before`" }),
  at: Schema.Number,
  action: DecisionAction,
  symbol: Schema.NullOr(Schema.String),
  usd: Schema.NullOr(Schema.Number),
  reason: Schema.String,
  status: DecisionStatus,
  txs: Schema.Array(Schema.String),
  error: Schema.NullOr(Schema.String)
}).annotations({ identifier: "DecisionItem" })

export const WalletSessionView = Schema.Struct({
  connected: Schema.Boolean,
  expiresAt: Schema.optional(Schema.Number)
}).annotations({ identifier: "WalletSession" })

/** An endpoint that reads an agent account's balances and prices, with the errors that can bring. */
const readsAccount = <const Name extends string>(endpoint: HttpApiEndpoint.HttpApiEndpoint<Name, "GET">) =>
  endpoint
    .addError(CardRequired.wire)
    .addError(NoAgentAccount.wire)
    .addError(SessionExpired.wire)
    .addError(NotLoggedIn.wire)
    .addError(AgentWalletFailed.wire)
    .addError(PriceUnavailable.wire)
    .addError(ChainUnavailable.wire)

export class StrategyApi extends HttpApiGroup.make("strategy")
  .add(
    HttpApiEndpoint.put("put", "/strategy")
      .setPayload(withFieldMessages(StrategyBody))
      .addSuccess(Strategy)
      .addError(CardRequired.wire)
      .addError(UnknownToken.wire)
      .addError(BadRequest.wire)
      .addError(AgentWalletFailed.wire)
      .annotate(OpenApi.Summary, "Set the strategy")
      .annotate(
        OpenApi.Description,
        "Sets the caller's strategy (replacing any earlier one): 1 to 10 known tokens with weights in (0, 1] " +
          "summing to 1, the expected weekly spend and a time zone. Served whatever AGENT_MODE is."
      )
  )
  .add(
    HttpApiEndpoint.get("get", "/strategy")
      .addSuccess(Strategy)
      .addError(CardRequired.wire)
      .addError(StrategyNotFound.wire)
      .annotate(OpenApi.Summary, "Read the strategy")
      .annotate(OpenApi.Description, "The caller's strategy; 404 STRATEGY_NOT_FOUND before one is set.")
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Strategy")
  .annotate(
    OpenApi.Description,
    "The card holder's instructions to the agent: the portfolio's target weights, the expected weekly card " +
      "spend and the time zone of that spending. Needs a card."
  ) {}

export class AgentApi extends HttpApiGroup.make("agent")
  .add(
    readsAccount(HttpApiEndpoint.get("portfolio", "/portfolio"))
      .addSuccess(Portfolio)
      .annotate(OpenApi.Summary, "Portfolio")
      .annotate(
        OpenApi.Description,
        "The agent wallet's holdings (tokens and USD1 cash) with weights, targets and market data, and the " +
          "card's USD1. Without a token: the card an operator made public (401 when none is); with one: the caller's."
      )
  )
  .add(
    readsAccount(HttpApiEndpoint.get("preview", "/agent/preview"))
      .setUrlParams(withFieldMessages(AtQuery))
      .addSuccess(Preview)
      .annotate(OpenApi.Summary, "Preview the agent's decision")
      .annotate(
        OpenApi.Description,
        "What the agent would decide at `at` (ISO-8601 with a zone, or ms; default now): the calendar and the " +
          "spending forecast at `at`, balances and prices now. Never trades, never writes. A card without a " +
          "strategy gets action none, rule NO_STRATEGY. The decision has one shape per action."
      )
  )
  .add(
    HttpApiEndpoint.get("decisions", "/agent/decisions")
      .setUrlParams(
        withFieldMessages(
          pageQuery({
            items: "decisions",
            id: /^[0-9]{1,19}$/,
            idMessage: "must be a decision id",
            beforeDescription: "the id of the last decision of the previous page: answers the decisions before it"
          })
        )
      )
      .addSuccess(Schema.Array(DecisionItem))
      .addError(CardRequired.wire)
      .addError(NoAgentAccount.wire)
      .annotate(OpenApi.Summary, "Decision log")
      .annotate(
        OpenApi.Description,
        "The agent's stored decisions, newest first, with their status and transactions; `?limit=` (1-200, " +
          "default 50), `?before=<id>` for the page after that decision. Empty for a card without a strategy, " +
          "and until the loop first decides the card (within AGENT_INTERVAL of its strategy)."
      )
  )
  .add(
    HttpApiEndpoint.get("session", "/agent/session")
      .addSuccess(WalletSessionView)
      .addError(SessionExpired.wire)
      .addError(NotLoggedIn.wire)
      .addError(AgentWalletFailed.wire)
      .annotate(OpenApi.Summary, "Agent wallet session")
      .annotate(OpenApi.Description, "Whether the agent wallet's provider session is usable.")
  )
  .middleware(OptionalAuthentication)
  // The token is optional: absent is the public card, present must be valid.
  .annotateEndpoints(OpenApi.Override, { security: [{}, { bearer: [] }] })
  .annotate(OpenApi.Title, "Agent")
  .annotate(
    OpenApi.Description,
    "The agent that keeps the card funded from a stock-token wallet (with AGENT_MODE dry or live): its " +
      "portfolio, what it would decide now or at another instant, and its decision log. Without a bearer token " +
      "these describe the card an operator made public (AGENT_PUBLIC_CARD), and answer 401 when none is; with " +
      "one, the caller's."
  ) {}
