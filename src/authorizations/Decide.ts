/**
 * The issuer's answer to a card authorization, as a pure function of what the database holds when
 * the card's row is locked: the card's state, the holder's controls, what was spent in the day and
 * the month, and the funds. No I/O; amounts are millionths of a dollar (bigint), times ms since epoch.
 *
 * The checks run in a fixed order and the first that fails is the reason, so a holder always hears
 * the most fundamental one: a canceled card is `card_canceled` even when it is also frozen and empty.
 */
import { type AllowanceState, lesser } from "../cards/Allowance.js"

/** Why an authorization was declined: the codes the app and the holder see. */
export const DECLINE_REASONS = [
  "insufficient_funds",
  "card_frozen",
  "card_canceled",
  "card_expired",
  "limit_exceeded",
  "merchant_category_blocked",
  "funds_unknown",
  "allowance_missing",
  "allowance_exceeded",
  "stand_in"
] as const
export type DeclineReason = (typeof DECLINE_REASONS)[number]

/** The holder's controls; a limit of `null` is no limit. */
export interface Controls {
  readonly frozen: boolean
  readonly perTransaction: bigint | null
  readonly daily: bigint | null
  readonly monthly: bigint | null
  /** Merchant category codes (ISO 18245, four digits) the card refuses. */
  readonly blockedMcc: ReadonlyArray<string>
}

export interface CardStanding {
  /** A face the holder replaced answers `canceled`; the current face `active`. */
  readonly state: "active" | "canceled"
  /** `MM/YY`: valid through the last day of that month, UTC. */
  readonly expiry: string
  readonly controls: Controls
}

/** What the card has committed already, and its wallet's balance as the block follower last saw it. */
export interface Funds {
  /** The card wallet's USD1 in millionths; none when never read. */
  readonly balance: bigint | undefined
  /** When the balance was last known current (the follower's last look at the chain's head). */
  readonly balanceCheckedAt: number | undefined
  /** Open holds of approved authorizations. */
  readonly held: bigint
  /** Cleared amounts the network settled that are not debited from the wallet yet. */
  readonly clearedPending: bigint
  /**
   * The spending allowance the settlement account takes the money under: its state, and what it
   * leaves after the holds and cleared amounts (`allowanceFigures`; nothing unless active).
   */
  readonly allowance: { readonly state: AllowanceState; readonly remaining: bigint }
}

/** Approved amounts counted against the daily and monthly limits (UTC day and month of `at`). */
export interface Spent {
  readonly today: bigint
  readonly thisMonth: bigint
}

export interface Request {
  /** What this message would add to the card's holds: a new authorization's amount, or an increment. */
  readonly amount: bigint
  /** The authorization's whole amount once approved (for the per-transaction limit). */
  readonly total: bigint
  readonly mcc: string
  readonly at: number
}

export type Decision =
  | { readonly approved: true; readonly availableAfter: bigint }
  | { readonly approved: false; readonly reason: DeclineReason; readonly available: bigint | undefined }

/** The wallet's funds an authorization may use: balance − holds − cleared amounts not debited (never below 0). */
const inWallet = (funds: Funds): bigint | undefined => {
  if (funds.balance === undefined) return undefined
  const left = funds.balance - funds.held - funds.clearedPending
  return left > 0n ? left : 0n
}

/** The funds an authorization may use: what the wallet has free, and no more than the spending allowance leaves. */
export const availableFunds = (funds: Funds): bigint | undefined => {
  const wallet = inWallet(funds)
  if (wallet === undefined) return undefined
  return lesser(wallet, funds.allowance.remaining)
}

/** Whether a card with expiry `MM/YY` has expired at `at`: after the last instant of that month, UTC. */
export const isExpired = (expiry: string, at: number): boolean => {
  const match = /^(0[1-9]|1[0-2])\/(\d{2})$/.exec(expiry)
  if (match === null) return true
  const month = Number(match[1])
  const year = 2000 + Number(match[2])
  // The first instant of the following month.
  return at >= Date.UTC(year, month, 1)
}

const overLimit = (limit: bigint | null, used: bigint, amount: bigint) => limit !== null && used + amount > limit

export const decide = (input: {
  readonly card: CardStanding
  readonly funds: Funds
  readonly spent: Spent
  readonly request: Request
  /** How old a balance may be and still be trusted (BALANCE_MAX_AGE). */
  readonly maxBalanceAgeMs: number
}): Decision => {
  const { card, funds, spent, request } = input
  const wallet = inWallet(funds)
  const available = availableFunds(funds)
  const decline = (reason: DeclineReason): Decision => ({ approved: false, reason, available })
  if (card.state === "canceled") return decline("card_canceled")
  if (isExpired(card.expiry, request.at)) return decline("card_expired")
  if (card.controls.frozen) return decline("card_frozen")
  if (card.controls.blockedMcc.includes(request.mcc)) return decline("merchant_category_blocked")
  if (
    (card.controls.perTransaction !== null && request.total > card.controls.perTransaction) ||
    overLimit(card.controls.daily, spent.today, request.amount) ||
    overLimit(card.controls.monthly, spent.thisMonth, request.amount)
  ) {
    return decline("limit_exceeded")
  }
  if (
    wallet === undefined ||
    available === undefined ||
    funds.balanceCheckedAt === undefined ||
    request.at - funds.balanceCheckedAt > input.maxBalanceAgeMs
  ) {
    return decline("funds_unknown")
  }
  if (funds.allowance.state !== "active") return decline("allowance_missing")
  if (request.amount > wallet) return decline("insufficient_funds")
  if (request.amount > funds.allowance.remaining) return decline("allowance_exceeded")
  return { approved: true, availableAfter: available - request.amount }
}

/** The UTC day and month `at` falls in, as their first instants: the windows of the daily and monthly limits. */
export const limitWindows = (at: number): { readonly dayStart: number; readonly monthStart: number } => {
  const date = new Date(at)
  return {
    dayStart: Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), date.getUTCDate()),
    monthStart: Date.UTC(date.getUTCFullYear(), date.getUTCMonth(), 1)
  }
}
