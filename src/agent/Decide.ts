/**
 * The agent's decision: a pure function of the instant, the tokens' market state at that instant, the
 * strategy, the card's and the agent wallet's balances, what the card has committed and owes, and the
 * card's spending history. No clock, no I/O:
 * the same input always gives the same decision. The rules are in docs/agent.md.
 *
 * One file although long (issue 21): the rules are one decision, taken in order (refill before
 * rebalance, each with its guards and its reason text), and each rule reads the ones before it;
 * split, a rule's order and its reason would live apart from the rules it depends on.
 */
import type { MarketData } from "../market/Api.js"
import {
  type AdHocClosure,
  type CalendarStatus,
  calendarStatus,
  defaultAdHocClosures,
  etDateOf,
  nextOpenTime,
  type SessionInterval,
  sessionsFor
} from "../market/Calendar.js"
import type { Decision, HoldDecision, NoneDecision, RebalanceDecision, RefillDecision } from "./Api.js"
import { forecastSpend, type SpendingHistory, typicalCardPayment } from "./Forecast.js"
import { formatEt, formatSpread, formatUsd, formatWeight } from "./Reasons.js"
import { type Strategy, strategyLimits } from "./Strategy.js"

export const agentRules = Object.freeze({
  /** The card never stays below this balance when a token can be sold. */
  floorUsd: 10,
  /** The smallest refill or rebalance trade. */
  minTradeUsd: 5,
  /** needUsd = forecast spend until the horizon × needBuffer. */
  needBuffer: 1.2,
  /** Regular-session refills happen in this last part of the session (or below the floor). */
  closeWindowMs: 30 * 60_000,
  /** Outside the regular session a token is sold only within this |spreadVsClose|. */
  maxSpreadOutsideRegular: 0.01,
  /** A rebalance is due when a weight is more than this far from its target. */
  rebalanceBand: 0.05
})

/** The symbol of the agent wallet's cash in a decision (a refill paid from cash sells nothing). */
export const CASH_SYMBOL = "USD1"

/** A token's market data at the decision instant (a `MarketData` fits). */
export type TokenMarketAt = Pick<MarketData, "status" | "tokenPrice" | "closeRef" | "spreadVsClose">

export interface TokenHolding {
  readonly symbol: string
  /** Whole tokens the agent wallet holds (0 for a target not held). */
  readonly balance: number
  /**
   * The token's market data with its status as it is AT the decision instant (the calendar's status then,
   * combined with the platform's paused flag: `tokenStatus(marketStatusAt(at), platform)`); null while its
   * price is unavailable (then it is neither valued nor traded).
   */
  readonly market: TokenMarketAt | null
}

/**
 * What the card has committed and owes beside its USD1, USD. The card's available funds are its USD1
 * less all three, and no more than its spending allowance still lets the program take after the
 * holds and pending clearings (docs/agent.md, "Available funds").
 */
export interface CardCommitments {
  /** Open holds of approved card payments. */
  readonly heldUsd: number
  /** Cleared card payments not yet debited from the card wallet. */
  readonly clearedPendingUsd: number
  /** Clearings that could not be debited: the card is frozen until the agent repays them. */
  readonly owedUsd: number
  /** What the token still allows the program to take from the card wallet; null when the card has no allowance. */
  readonly allowanceUsd: number | null
}

const NO_COMMITMENTS: CardCommitments = { heldUsd: 0, clearedPendingUsd: 0, owedUsd: 0, allowanceUsd: null }

export interface DecisionInput {
  /** The decision instant, ms since epoch (calendar and forecast are evaluated at it). */
  readonly at: number
  readonly strategy: Strategy
  /** USD1 on the card. */
  readonly cardUsd1: number
  /** What the card has committed and owes; absent: nothing. */
  readonly commitments?: CardCommitments
  /** USD1 cash in the agent wallet. */
  readonly walletUsd1: number
  /** Every token the agent wallet holds or the strategy targets, each symbol once. */
  readonly tokens: ReadonlyArray<TokenHolding>
  readonly spending: SpendingHistory
  /** The calendar's ad-hoc closure table; default `defaultAdHocClosures`. */
  readonly closures?: ReadonlyArray<AdHocClosure>
}

// The decision's four shapes are the API's (Api.ts): each rule is described in docs/agent.md.
export type { Decision, HoldDecision, NoneDecision, RebalanceDecision, RefillDecision }
export type NoneRule = NoneDecision["rule"]
export type RefillRule = RefillDecision["rule"]
export type HoldRule = HoldDecision["rule"]
export type RebalanceRule = RebalanceDecision["rule"]
/** A stable machine-readable class of the decision (the reason is its sentence with the numbers). */
export type DecisionRule = Decision["rule"]

// ---------------------------------------------------------------------------------------------------
// Amounts

const cents = (usd: number): number => Number((usd * 100).toFixed(6))

/** Rounds up to the cent, ignoring binary noise (7.000000001 stays 7). */
export const ceilCents = (usd: number): number => Math.ceil(cents(usd)) / 100

/** Rounds down to the cent, ignoring binary noise. */
const floorCents = (usd: number): number => Math.floor(cents(usd)) / 100

// ---------------------------------------------------------------------------------------------------
// Positions

/** Why a token cannot be sold for a refill; `stage` orders them from "cannot trade" to "too small". */
type Obstacle =
  | { readonly stage: 0; readonly kind: "noPrice" | "paused" | "notOpen" | "noStatus" }
  | { readonly stage: 0; readonly kind: "closed" | "notTrading"; readonly code: string | null }
  | { readonly stage: 1; readonly kind: "noCloseRef" }
  | { readonly stage: 1; readonly kind: "spread"; readonly spread: number }
  | { readonly stage: 2; readonly kind: "small"; readonly valueUsd: number }

interface Position {
  readonly symbol: string
  readonly cash: boolean
  readonly balance: number
  /** Undefined while the token's price is unknown. */
  readonly valueUsd: number | undefined
  readonly target: number
  /** Share of the wallet's known value (cash included), 0 when unknown. */
  readonly weight: number
  /** weight - target */
  readonly drift: number
  /** The token's spreadVsClose; null for cash or without a close reference. */
  readonly spread: number | null
  readonly market: TokenMarketAt | null
  /** Why it cannot trade now; undefined when it can (always for cash). */
  readonly tradeObstacle: Obstacle | undefined
}

const SELLABLE_STATUSES: ReadonlySet<string> = new Set(["premarket", "regular", "postmarket", "overnight", "offhours"])

/** Rule 6: never trade a token that is paused, closed, not open, not TRADING, or of unknown state. */
const tradeObstacleOf = (market: TokenMarketAt | null): Obstacle | undefined => {
  if (market === null) return { stage: 0, kind: "noPrice" }
  const { marketStatus, openState, reasonCode } = market.status
  if (marketStatus === "pause" || marketStatus === "paused" || reasonCode === "ASSET_PAUSED") {
    return { stage: 0, kind: "paused" }
  }
  if (marketStatus === "closed") return { stage: 0, kind: "closed", code: reasonCode }
  if (!openState) return { stage: 0, kind: "notOpen" }
  if (reasonCode !== "TRADING") return { stage: 0, kind: "notTrading", code: reasonCode }
  if (marketStatus === null || !SELLABLE_STATUSES.has(marketStatus)) return { stage: 0, kind: "noStatus" }
  return undefined
}

/** Rule 5's guard outside the regular session: a close reference and |spreadVsClose| within 1%. */
const spreadObstacleOf = (position: Position): Obstacle | undefined => {
  if (position.market?.closeRef == null || position.spread === null) return { stage: 1, kind: "noCloseRef" }
  return Math.abs(position.spread) > agentRules.maxSpreadOutsideRegular
    ? { stage: 1, kind: "spread", spread: position.spread }
    : undefined
}

const positionsOf = (input: DecisionInput): ReadonlyArray<Position> => {
  const bySymbol = new Map(input.tokens.map((token) => [token.symbol, token]))
  const symbols = [...new Set([...bySymbol.keys(), ...Object.keys(input.strategy.targets)])].sort()
  const tokens = symbols.map((symbol) => {
    const holding = bySymbol.get(symbol) ?? { symbol, balance: 0, market: null }
    const valueUsd =
      holding.balance === 0 ? 0 : holding.market === null ? undefined : holding.balance * holding.market.tokenPrice
    return { holding, valueUsd, target: input.strategy.targets[symbol] ?? 0 }
  })
  const total = tokens.reduce((sum, token) => sum + (token.valueUsd ?? 0), input.walletUsd1)
  const weightOf = (value: number | undefined) => (total > 0 && value !== undefined ? value / total : 0)
  const cashWeight = weightOf(input.walletUsd1)
  const cash: Position = {
    symbol: CASH_SYMBOL,
    cash: true,
    balance: input.walletUsd1,
    valueUsd: input.walletUsd1,
    target: 0,
    weight: cashWeight,
    drift: cashWeight,
    spread: null,
    market: null,
    tradeObstacle: undefined
  }
  return [
    cash,
    ...tokens.map(({ holding, target, valueUsd }): Position => {
      const weight = weightOf(valueUsd)
      return {
        symbol: holding.symbol,
        cash: false,
        balance: holding.balance,
        valueUsd,
        target,
        weight,
        drift: weight - target,
        spread: holding.market?.spreadVsClose ?? null,
        market: holding.market,
        tradeObstacle: tradeObstacleOf(holding.market)
      }
    })
  ]
}

/**
 * A sold position's spread in the decision: USD1 cash is the dollar itself, and a token without a close
 * reference can only be sold in the regular session, where the reference follows the price (docs/market.md).
 */
const soldSpread = (position: Position): number => position.spread ?? 0

const absSpread = (position: Position): number =>
  position.cash ? 0 : position.spread === null ? Number.POSITIVE_INFINITY : Math.abs(position.spread)

// Positions are listed USD1 cash first, then tokens by symbol, and sorts are stable: remaining ties go to the
// first listed, so the decision never depends on the order of the input tokens.

/** Most overweight first; ties: smaller |spread|. */
const bySellPriority = (a: Position, b: Position): number => b.drift - a.drift || absSpread(a) - absSpread(b)

/** Most underweight first; ties: smaller |spread|. */
const byBuyPriority = (a: Position, b: Position): number => a.drift - b.drift || absSpread(a) - absSpread(b)

// ---------------------------------------------------------------------------------------------------
// Sentences

const listOf = (items: ReadonlyArray<string>): string =>
  items.length <= 1 ? (items[0] ?? "") : `${items.slice(0, -1).join(", ")} and ${items.at(-1)}`

const closedWhy = (code: string | null): string =>
  code === "WEEKEND" ? "for the weekend" : code === "HOLIDAY" ? "for a market holiday" : "at this hour"

const SPREAD_LIMIT = `${agentRules.maxSpreadOutsideRegular * 100}%`

/** The obstacle as a predicate, for one subject or several. */
const predicateOf = (obstacle: Obstacle, many: boolean): string => {
  const is = many ? "are" : "is"
  const has = many ? "have" : "has"
  switch (obstacle.kind) {
    case "noPrice":
      return `${has} no price right now`
    case "paused":
      return `${is} paused on ${many ? "their" : "its"} platform`
    case "closed":
      return `${is} closed ${closedWhy(obstacle.code)}`
    case "notOpen":
      return "cannot trade right now"
    case "notTrading":
      return `${is} not trading${obstacle.code === null ? "" : ` (${obstacle.code})`}`
    case "noStatus":
      return `${has} no market status`
    case "noCloseRef":
      return `${has} no close reference yet, needed outside the regular session`
    case "spread":
      return `${many ? "trade" : "trades"} ${formatSpread(obstacle.spread)} from ${many ? "their" : "its"} last close, more than the ${SPREAD_LIMIT} allowed outside the regular session`
    case "small":
      return `${is} worth only ${formatUsd(obstacle.valueUsd)}`
  }
}

/** "NVDA and TSLA are paused on their platform; AAPL is worth only $3.00": equal obstacles share a clause. */
const describeObstacles = (items: ReadonlyArray<readonly [string, Obstacle]>): string => {
  const groups = new Map<string, { readonly obstacle: Obstacle; readonly symbols: Array<string> }>()
  for (const [symbol, obstacle] of items) {
    const key = predicateOf(obstacle, false)
    const group = groups.get(key)
    if (group === undefined) groups.set(key, { obstacle, symbols: [symbol] })
    else group.symbols.push(symbol)
  }
  return [...groups.values()]
    .map(({ obstacle, symbols }) => `${listOf(symbols)} ${predicateOf(obstacle, symbols.length > 1)}`)
    .join("; ")
}

/** "weight 62.0%, target 50.0%" */
const weightVsTarget = (position: Position): string =>
  `weight ${formatWeight(position.weight)}, target ${formatWeight(position.target)}`

const nameOf = (position: Position): string => (position.cash ? "USD1 cash" : position.symbol)

const addDays = (date: string, days: number): string =>
  new Date(Date.parse(`${date}T00:00:00Z`) + days * 86_400_000).toISOString().slice(0, 10)

/** The next session of any kind starting after `at`. */
const nextSessionAfter = (at: number, closures: ReadonlyArray<AdHocClosure>): SessionInterval | undefined => {
  const today = etDateOf(at)
  for (let i = 0; i < 400; i++) {
    const next = sessionsFor(addDays(today, i), closures).find((session) => session.start > at)
    if (next !== undefined) return next
  }
  return undefined
}

const SESSION_NAMES = {
  overnight: "overnight session",
  premarket: "premarket",
  regular: "regular session",
  postmarket: "postmarket"
} as const

// ---------------------------------------------------------------------------------------------------
// The decision

/** The card's funds as a decision counts them, USD. */
interface Funds {
  readonly commitments: CardCommitments
  /** USD1 the card keeps once its holds and pending clearings are debited. */
  readonly kept: number
  /** What the allowance still lets the program take after those; Infinity without an allowance. */
  readonly room: number
  /** What the next card payment may use: kept less owed, within the room. */
  readonly available: number
  /** The holder's typical card payment (0 without any). */
  readonly typicalUsd: number
  /** The balance below which the card is refilled at once: the $10 floor, or the typical payment when larger. */
  readonly floorUsd: number
}

const fundsOf = (input: DecisionInput): Funds => {
  const commitments = input.commitments ?? NO_COMMITMENTS
  const committed = commitments.heldUsd + commitments.clearedPendingUsd
  const kept = input.cardUsd1 - committed
  const room =
    commitments.allowanceUsd === null ? Number.POSITIVE_INFINITY : Math.max(0, commitments.allowanceUsd - committed)
  const typicalUsd = typicalCardPayment(input.spending.payments, input.at)
  return {
    commitments,
    kept,
    room,
    available: Math.min(kept - commitments.owedUsd, room),
    typicalUsd,
    floorUsd: Math.max(agentRules.floorUsd, typicalUsd)
  }
}

/**
 * What brings the card's available funds up to `target`, once what it owes is repaid: the USD1 it
 * needs on top of what it keeps, no more than its allowance lets card payments use.
 */
const topUpTo = (funds: Funds, target: number): number => Math.max(0, Math.min(target, funds.room) - funds.kept)

interface Context {
  readonly input: DecisionInput
  readonly closures: ReadonlyArray<AdHocClosure>
  readonly calendar: CalendarStatus
  readonly needUsd: number
  readonly horizon: number
  readonly positions: ReadonlyArray<Position>
  readonly funds: Funds
}

/** "The card holds $20.00", or with commitments what is available and why. */
const cardHolds = (ctx: Context): string => {
  const { commitments, available, kept, room } = ctx.funds
  const less = [
    commitments.heldUsd > 0 ? `${formatUsd(commitments.heldUsd)} held for card payments` : "",
    commitments.clearedPendingUsd > 0 ? `${formatUsd(commitments.clearedPendingUsd)} cleared and not yet debited` : "",
    commitments.owedUsd > 0 ? `${formatUsd(commitments.owedUsd)} owed to the card program` : ""
  ].filter((part) => part !== "")
  const capped = room < kept - commitments.owedUsd
  if (less.length === 0 && !capped) return `The card holds ${formatUsd(ctx.input.cardUsd1)}`
  const within = capped ? `, within the ${formatUsd(room)} its spending allowance still lets card payments use` : ""
  const minus = less.length === 0 ? "" : ` less ${listOf(less)}`
  return `The card has ${formatUsd(available)} available (${formatUsd(ctx.input.cardUsd1)} of USD1${minus}${within})`
}

/** "the $10.00 floor", or "the $25.00 floor (its typical card payment)" when that is larger. */
const floorText = (ctx: Context): string =>
  ctx.funds.typicalUsd > agentRules.floorUsd
    ? `the ${formatUsd(ctx.funds.floorUsd)} floor (its typical card payment)`
    : `the ${formatUsd(agentRules.floorUsd)} floor`
const needs = (ctx: Context): string => `needs ${formatUsd(ctx.needUsd)} until ${formatEt(ctx.horizon)}`
const regularOpens = (ctx: Context): string => `the regular session opens ${formatEt(ctx.calendar.nextOpenTime)}`

/** When the market next lets the agent act, for a hold. */
const whenSentence = (ctx: Context): string => {
  const { calendar, closures } = ctx
  if (calendar.session === "regular") {
    return `The regular session closes ${formatEt(calendar.nextCloseTime)}; the next one opens ${formatEt(ctx.horizon)}.`
  }
  if (calendar.session !== "closed") return `The next regular session opens ${formatEt(calendar.nextOpenTime)}.`
  const next = nextSessionAfter(ctx.input.at, closures)
  return next === undefined
    ? `The market is closed; ${regularOpens(ctx)}.`
    : `The market is closed; trading resumes ${formatEt(next.start)} (${SESSION_NAMES[next.session]}) and ${regularOpens(ctx)}.`
}

/** The refill from cash or from a token, or a hold naming what blocks it (rules 4 to 6). */
const refill = (ctx: Context, rule: RefillRule, usd: number): RefillDecision | HoldDecision => {
  const { walletUsd1 } = ctx.input
  const floor = floorText(ctx)
  const owed = ctx.funds.commitments.owedUsd
  const base = { needUsd: ctx.needUsd, horizon: ctx.horizon }
  const situation =
    rule === "REFILL_BEFORE_CLOSE"
      ? `${cardHolds(ctx)} but ${needs(ctx)}`
      : rule === "REFILL_BELOW_FLOOR"
        ? `${cardHolds(ctx)}, below ${floor}, and ${needs(ctx)}`
        : rule === "REPAY_OWED"
          ? `${cardHolds(ctx)}; the card is frozen until the ${formatUsd(owed)} it owes the card program (a card payment its wallet could not pay) is repaid`
          : `${cardHolds(ctx)}, below ${floor}; outside the regular session the agent only restores the floor`
  const when = rule === "REFILL_BEFORE_CLOSE" ? ` before the close at ${formatEt(ctx.calendar.nextCloseTime)}` : ""
  // What the card owes goes to the card program first, straight from the wallet: no allowance needed.
  const rest = usd - owed > 1e-9 ? ", and the rest goes to the card" : ""
  const repays =
    owed > 0 ? ` Of it, ${formatUsd(owed)} first repays the card program, which unfreezes the card${rest}.` : ""

  if (walletUsd1 >= usd) {
    return {
      action: "refill",
      rule,
      symbol: CASH_SYMBOL,
      usd,
      repayUsd: owed,
      spread: 0,
      ...base,
      reason: `${situation}. The agent sends ${formatUsd(usd)}${when} from the wallet's ${formatUsd(walletUsd1)} USD1 cash; nothing is sold.${repays}`
    }
  }

  const guarded = rule === "REFILL_BELOW_FLOOR_OUTSIDE_REGULAR"
  const checked = ctx.positions
    .filter((position) => !position.cash && position.balance > 0)
    .sort(bySellPriority)
    .map((position) => {
      const obstacle: Obstacle | undefined =
        position.tradeObstacle ??
        (guarded ? spreadObstacleOf(position) : undefined) ??
        (position.valueUsd !== undefined && position.valueUsd < usd
          ? { stage: 2, kind: "small", valueUsd: position.valueUsd }
          : undefined)
      return { position, obstacle }
    })
  const sold = checked.find(({ obstacle }) => obstacle === undefined)?.position
  if (sold !== undefined) {
    const furthest =
      sold.drift <= 0
        ? ""
        : `, the ${checked[0]!.position === sold ? "" : "sellable "}holding furthest above its target`
    const spread = sold.spread === null ? "" : `; it trades ${formatSpread(sold.spread)} from its last close`
    return {
      action: "refill",
      rule,
      symbol: sold.symbol,
      usd,
      repayUsd: owed,
      spread: soldSpread(sold),
      ...base,
      reason: `${situation}. The agent sells ${formatUsd(usd)} of ${sold.symbol}${furthest} (${weightVsTarget(sold)})${when === "" ? "" : `,${when}`}${spread}.${repays}`
    }
  }

  const obstacles = checked.flatMap(({ obstacle, position }) =>
    obstacle === undefined ? [] : [[position.symbol, obstacle] as const]
  )
  const stage = Math.max(-1, ...obstacles.map(([, obstacle]) => obstacle.stage))
  const holdRule: HoldRule =
    stage < 0 ? "NOTHING_TO_SELL" : stage === 0 ? "NOT_TRADING" : stage === 1 ? "SPREAD_GUARD" : "POSITION_TOO_SMALL"
  const cash = formatUsd(walletUsd1)
  const blocked =
    stage < 0
      ? `the agent wallet holds no tokens and ${walletUsd1 > 0 ? `only ${cash}` : "no"} USD1 cash`
      : `${describeObstacles(obstacles)}${walletUsd1 > 0 ? `, and the wallet's ${cash} USD1 cash is not enough` : ""}`
  const situationNow = guarded ? `${cardHolds(ctx)}, below ${floor}` : situation
  return {
    action: "hold",
    rule: holdRule,
    usd,
    ...base,
    reason: `${situationNow}. A refill of ${formatUsd(usd)} cannot be made now: ${blocked}. ${whenSentence(ctx)}`
  }
}

type RebalancePlan =
  | { readonly kind: "none" }
  /** `due` names the position off by more than the band. */
  | { readonly kind: "trade"; readonly due: string; readonly decision: RebalanceDecision }
  | { readonly kind: "blocked"; readonly due: string; readonly why: string }

/**
 * Rule 7. Due when a position (USD1 cash included, target 0) is more than 5 points off its target. The
 * trade sells the most overweight position that can trade and buys the most underweight token that can;
 * one of the two must be out of the band, and the amount is what brings the nearer of the two exactly to its
 * target (never past it, so rebalances cannot oscillate), at least $5.
 */
const planRebalance = (ctx: Context): RebalancePlan => {
  const { minTradeUsd, rebalanceBand } = agentRules
  const band = rebalanceBand + 1e-9 // 0.55 - 0.5 is 0.05000000000000004, which is not "more than 5 points"
  const considered = ctx.positions.filter((p) => p.balance > 0 || p.target > 0)
  const worst = considered
    .filter((p) => Math.abs(p.drift) > band)
    .sort((a, b) => Math.abs(b.drift) - Math.abs(a.drift))[0]
  if (worst === undefined) return { kind: "none" }
  const due = `${nameOf(worst)} is off its target by more than ${rebalanceBand * 100} points (${weightVsTarget(worst)})`
  const blocked = (why: string): RebalancePlan => ({ kind: "blocked", due, why })

  const unpriced = considered.filter((p) => p.valueUsd === undefined).map((p) => p.symbol)
  if (unpriced.length > 0) {
    return blocked(
      `the weights are uncertain: ${listOf(unpriced)} ${unpriced.length > 1 ? "have" : "has"} no price right now`
    )
  }
  const tradable = considered.filter((p) => p.tradeObstacle === undefined)
  const seller = tradable.filter((p) => p.drift > 0).sort(bySellPriority)[0]
  const buyer = tradable.filter((p) => p.drift < 0 && !p.cash).sort(byBuyPriority)[0]
  const blockedSide = (side: "above" | "below", verb: string): RebalancePlan => {
    const stuck = considered.flatMap((p) =>
      (side === "above" ? p.drift > 0 : p.drift < 0) && p.tradeObstacle !== undefined
        ? [[p.symbol, p.tradeObstacle] as const]
        : []
    )
    const which = `no ${side === "above" ? "position" : "token"} ${side} its target can be ${verb} now`
    return blocked(stuck.length === 0 ? which : `${which}: ${describeObstacles(stuck)}`)
  }
  if (seller === undefined) return blockedSide("above", "sold")
  if (buyer === undefined) return blockedSide("below", "bought")
  if (Math.max(seller.drift, -buyer.drift) <= band) {
    // Then the out-of-band position is one that cannot trade (a tradable one would be the seller or the
    // buyer); trading the positions inside the band instead would only churn.
    return blocked(describeObstacles([[worst.symbol, worst.tradeObstacle!]]))
  }
  const total = ctx.positions.reduce((sum, p) => sum + (p.valueUsd ?? 0), 0)
  const usd = floorCents(Math.min(seller.drift, -buyer.drift) * total)
  if (usd < minTradeUsd) {
    return blocked(`the trade that corrects it would be ${formatUsd(usd)}, under the ${formatUsd(minTradeUsd)} minimum`)
  }
  // The seller or the buyer is out of the band (not necessarily the worst position, which may be blocked).
  const outOfBand = seller.drift >= -buyer.drift ? seller : buyer
  const trade = seller.cash
    ? `invests ${formatUsd(usd)} of USD1 cash (${weightVsTarget(seller)})`
    : `sells ${formatUsd(usd)} of ${seller.symbol} (${weightVsTarget(seller)})`
  return {
    kind: "trade",
    due,
    decision: {
      action: "rebalance",
      rule: "REBALANCE_DRIFT",
      symbol: seller.symbol,
      buySymbol: buyer.symbol,
      usd,
      spread: soldSpread(seller),
      needUsd: ctx.needUsd,
      horizon: ctx.horizon,
      reason: `${nameOf(outOfBand)} is more than ${rebalanceBand * 100} points off its target. The agent ${trade} to buy ${buyer.symbol} (${weightVsTarget(buyer)}).`
    }
  }
}

/** The calendar at `at`, the end of the forecast window and the card's need until then (rule 1). */
const outlook = (
  at: number,
  spending: SpendingHistory,
  strategy: Pick<Strategy, "weeklySpendUsd" | "timeZone">,
  closures: ReadonlyArray<AdHocClosure>
) => {
  const calendar = calendarStatus(at, closures)
  const horizon =
    calendar.session === "regular" ? nextOpenTime(calendar.nextCloseTime, closures) : calendar.nextOpenTime
  const forecast = forecastSpend(spending, strategy.weeklySpendUsd, strategy.timeZone, at, horizon)
  return { calendar, horizon, needUsd: ceilCents(forecast.usd * agentRules.needBuffer) }
}

/**
 * What the agent decides for a card without a strategy: nothing, saying why. Its need is forecast from
 * its own payments alone (no weekly estimate is given), in the default time zone.
 */
export const withoutStrategy = (input: {
  readonly at: number
  readonly spending: SpendingHistory
  readonly closures?: ReadonlyArray<AdHocClosure>
}): NoneDecision => {
  const { horizon, needUsd } = outlook(
    input.at,
    input.spending,
    { weeklySpendUsd: 0, timeZone: strategyLimits.defaultTimeZone },
    input.closures ?? defaultAdHocClosures
  )
  return {
    action: "none",
    rule: "NO_STRATEGY",
    needUsd,
    horizon,
    reason: `The card has no strategy yet, so the agent does nothing for it until one is set (PUT /strategy). Its own payments forecast a need of ${formatUsd(needUsd)} until ${formatEt(horizon)}.`
  }
}

/**
 * The agent's decision at `input.at`. Throws RangeError only for an instant the calendar refuses (NaN,
 * Infinity). Amounts are expected finite and non-negative; `strategy` as `validateStrategy` returns it.
 */
export const decide = (input: DecisionInput): Decision => {
  const closures = input.closures ?? defaultAdHocClosures
  const { at, strategy } = input
  const { closeWindowMs, minTradeUsd } = agentRules
  const { calendar, horizon, needUsd } = outlook(at, input.spending, strategy, closures)
  const regular = calendar.session === "regular"
  const funds = fundsOf(input)
  const { available, floorUsd } = funds
  const owed = funds.commitments.owedUsd
  const ctx: Context = { input, closures, calendar, needUsd, horizon, positions: positionsOf(input), funds }

  const belowFloor = available < floorUsd
  const inCloseWindow = regular && at >= calendar.nextCloseTime - closeWindowMs
  const refillNow = belowFloor || (inCloseWindow && Math.max(needUsd, floorUsd) > available)
  // A card that owes is frozen: it is repaid at once, in any session, with the top-up the session allows.
  if (refillNow || owed > 0) {
    const target = regular && refillNow ? Math.max(needUsd, floorUsd) : floorUsd
    const topUp = topUpTo(funds, target)
    if (owed + topUp > 0) {
      const rule: RefillRule =
        topUp === 0
          ? "REPAY_OWED"
          : !regular
            ? "REFILL_BELOW_FLOOR_OUTSIDE_REGULAR"
            : belowFloor
              ? "REFILL_BELOW_FLOOR"
              : "REFILL_BEFORE_CLOSE"
      return refill(ctx, rule, ceilCents(Math.max(owed + topUp, minTradeUsd)))
    }
  }
  // What more USD1 would bring card payments (none once the allowance is what limits them).
  const shortfall = topUpTo(funds, Math.max(needUsd, floorUsd))

  const plan = planRebalance(ctx)
  if (regular && plan.kind === "trade") return plan.decision
  const none = (rule: NoneRule, reason: string): NoneDecision => ({ action: "none", rule, reason, needUsd, horizon })
  const floor = floorText(ctx)
  const opens = formatEt(calendar.nextOpenTime)
  const rebalanceNote =
    plan.kind === "none"
      ? ""
      : regular && plan.kind === "blocked"
        ? ` ${plan.due}, but ${plan.why}.`
        : ` ${plan.due}; rebalancing waits for the regular session, which opens ${opens}.`
  if (shortfall > 0) {
    const waits = regular
      ? `the agent refills in the last 30 minutes before the close, from ${formatEt(calendar.nextCloseTime - closeWindowMs)}`
      : `the refill waits for the regular session, which opens ${opens}`
    return none(
      regular ? "OUTSIDE_CLOSE_WINDOW" : "OUTSIDE_REGULAR_SESSION",
      `${cardHolds(ctx)} and ${needs(ctx)}. It is above ${floor}, so ${waits}.${rebalanceNote}`
    )
  }
  const limited =
    funds.room < Math.max(needUsd, floorUsd)
      ? ` More USD1 on the card would not raise what its spending allowance lets card payments use: the holder can sign a larger allowance.`
      : ""
  const enough =
    limited === ""
      ? `${cardHolds(ctx)}, enough for the ${formatUsd(needUsd)} it needs until ${formatEt(horizon)} and ${floor}.`
      : `${cardHolds(ctx)}.${limited}`
  const rule = plan.kind === "none" ? "ENOUGH_BALANCE" : regular ? "REBALANCE_BLOCKED" : "OUTSIDE_REGULAR_SESSION"
  return none(rule, `${enough}${rebalanceNote}`)
}
