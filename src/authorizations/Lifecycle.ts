/**
 * What a network event does to an authorization's amounts and status: pure, amounts in millionths.
 *
 * `approved` is the amount the authorization stands for (increments added, reversals taken off), `held`
 * what is still held on the card for it, `cleared` what clearings settled so far. A clearing may be
 * more than the hold (a tip) or less (fuel): it releases as much of the hold as it covers, and the
 * network's `settled` flag releases the rest. Nothing here moves money: a clearing is "debit pending".
 */
import type { LifecycleEvent } from "./CardNetwork.js"

export type AuthorizationStatus = "declined" | "pending" | "settled" | "reversed" | "expired"

export interface Amounts {
  readonly approved: bigint
  readonly held: bigint
  readonly cleared: bigint
  readonly status: AuthorizationStatus
}

const min = (a: bigint, b: bigint) => (a < b ? a : b)
const nonNegative = (value: bigint) => (value > 0n ? value : 0n)

/** The amounts after one event; a refund is a transaction of its own and changes none of them. */
export const applyEvent = (amounts: Amounts, event: Pick<LifecycleEvent, "type" | "amount">): Amounts => {
  switch (event.type) {
    case "adjustment": {
      const held = nonNegative(event.amount - amounts.cleared)
      return {
        ...amounts,
        approved: event.amount,
        held,
        status: held > 0n || amounts.cleared > 0n ? "pending" : "reversed"
      }
    }
    case "reversal": {
      const released = min(event.amount, amounts.held)
      const held = amounts.held - released
      return {
        ...amounts,
        approved: nonNegative(amounts.approved - released),
        held,
        status: held === 0n && amounts.cleared === 0n ? "reversed" : amounts.status
      }
    }
    case "expiry":
      return { ...amounts, held: 0n, status: amounts.cleared === 0n ? "expired" : amounts.status }
    case "clearing":
      return {
        ...amounts,
        held: nonNegative(amounts.held - event.amount),
        cleared: amounts.cleared + event.amount,
        status: amounts.status === "settled" ? "settled" : "pending"
      }
    case "refund":
      return amounts
  }
}

/** The network says the transaction settled: nothing stays held for it. */
export const settle = (amounts: Amounts): Amounts => ({ ...amounts, held: 0n })
