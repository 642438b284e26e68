import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import type { LifecycleEvent } from "../../src/authorizations/CardNetwork.js"
import {
  availableFunds,
  type CardStanding,
  decide,
  type Funds,
  isExpired,
  limitWindows
} from "../../src/authorizations/Decide.js"
import { type Amounts, applyEvent, settle } from "../../src/authorizations/Lifecycle.js"

const AT = Date.UTC(2026, 10, 28, 12)
const usd = (dollars: number) => BigInt(Math.round(dollars * 1_000_000))

const card: CardStanding = {
  state: "active",
  expiry: "11/29",
  controls: { frozen: false, perTransaction: null, daily: null, monthly: null, blockedMcc: [] }
}
const allowed = (remaining: bigint) => ({ state: "active" as const, remaining })
const funds: Funds = {
  balance: usd(100),
  balanceCheckedAt: AT - 1_000,
  held: 0n,
  clearedPending: 0n,
  allowance: allowed(usd(1_000))
}
const spent = { today: 0n, thisMonth: 0n }
const request = (amount: number, mcc = "5814") => ({ amount: usd(amount), total: usd(amount), mcc, at: AT })
const decided = (overrides: Partial<Parameters<typeof decide>[0]> = {}) =>
  decide({ card, funds, spent, request: request(10), maxBalanceAgeMs: 30_000, ...overrides })

const micros = FastCheck.bigInt({ min: 0n, max: 10n ** 12n })

describe("the authorization decision", () => {
  it("approves within the funds and tells what is left", () => {
    expect(decided()).toEqual({ approved: true, availableAfter: usd(90) })
    expect(decided({ request: request(100) })).toEqual({ approved: true, availableAfter: 0n })
    expect(decided({ request: request(100.01) })).toMatchObject({ approved: false, reason: "insufficient_funds" })
  })

  it("declines with the most fundamental reason first", () => {
    const everything: CardStanding = {
      state: "canceled",
      expiry: "01/20",
      controls: { frozen: true, perTransaction: 0n, daily: 0n, monthly: 0n, blockedMcc: ["5814"] }
    }
    const empty = { ...funds, balance: 0n }
    const reasons = [
      everything,
      { ...everything, state: "active" as const },
      { ...everything, state: "active" as const, expiry: "11/29" },
      { ...everything, state: "active" as const, expiry: "11/29", controls: { ...everything.controls, frozen: false } },
      {
        ...everything,
        state: "active" as const,
        expiry: "11/29",
        controls: { ...everything.controls, frozen: false, blockedMcc: [] }
      }
    ].map((standing) => decided({ card: standing, funds: empty }))
    expect(reasons.map((decision) => (decision.approved ? "approved" : decision.reason))).toEqual([
      "card_canceled",
      "card_expired",
      "card_frozen",
      "merchant_category_blocked",
      "limit_exceeded"
    ])
    expect(decided({ funds: empty })).toMatchObject({ reason: "insufficient_funds" })
  })

  it("trusts a balance only while it is recent", () => {
    expect(decided({ funds: { ...funds, balanceCheckedAt: AT - 30_000 } })).toMatchObject({ approved: true })
    expect(decided({ funds: { ...funds, balanceCheckedAt: AT - 30_001 } })).toMatchObject({ reason: "funds_unknown" })
    expect(decided({ funds: { ...funds, balance: undefined } })).toMatchObject({ reason: "funds_unknown" })
  })

  it("spends only under an active spending allowance, and within what it leaves", () => {
    for (const state of ["none", "pending", "revoked", "expired"] as const) {
      expect(decided({ funds: { ...funds, allowance: { state, remaining: 0n } } })).toEqual({
        approved: false,
        reason: "allowance_missing",
        available: 0n
      })
    }
    expect(decided({ funds: { ...funds, allowance: allowed(usd(10)) } })).toEqual({
      approved: true,
      availableAfter: 0n
    })
    expect(decided({ funds: { ...funds, allowance: allowed(usd(9.99)) } })).toEqual({
      approved: false,
      reason: "allowance_exceeded",
      available: usd(9.99)
    })
    // Neither enough money nor enough allowance: the money is what the holder hears of.
    expect(decided({ funds: { ...funds, balance: usd(5), allowance: allowed(usd(5)) } })).toMatchObject({
      reason: "insufficient_funds"
    })
    // An unknown balance is told before a missing allowance: nothing is known to spend.
    expect(
      decided({ funds: { ...funds, balance: undefined, allowance: { state: "none", remaining: 0n } } })
    ).toMatchObject({ reason: "funds_unknown" })
  })

  it("counts the per-transaction limit on the whole authorization and the others on what it adds", () => {
    const limited = (controls: Partial<CardStanding["controls"]>) => ({
      ...card,
      controls: { ...card.controls, ...controls }
    })
    expect(decided({ card: limited({ perTransaction: usd(10) }) })).toMatchObject({ approved: true })
    expect(
      decided({ card: limited({ perTransaction: usd(10) }), request: { ...request(1), total: usd(10.01) } })
    ).toMatchObject({ reason: "limit_exceeded" })
    expect(decided({ card: limited({ daily: usd(15) }), spent: { today: usd(5), thisMonth: usd(5) } })).toMatchObject({
      approved: true
    })
    expect(decided({ card: limited({ monthly: usd(15) }), spent: { today: 0n, thisMonth: usd(5.01) } })).toMatchObject({
      reason: "limit_exceeded"
    })
  })

  it.prop(
    "never approves more than the wallet has free or the allowance leaves, and what is left is exactly the rest",
    [micros, micros, micros, micros, micros],
    ([balance, held, cleared, remaining, amount]) => {
      const given: Funds = {
        balance,
        balanceCheckedAt: AT,
        held,
        clearedPending: cleared,
        allowance: allowed(remaining)
      }
      const decision = decide({
        card,
        funds: given,
        spent,
        request: { amount, total: amount, mcc: "5814", at: AT },
        maxBalanceAgeMs: 1
      })
      const available = availableFunds(given)!
      const free = balance - held - cleared
      expect(available >= 0n).toBe(true)
      expect(available <= remaining).toBe(true)
      if (decision.approved) {
        expect(amount <= available).toBe(true)
        expect(decision.availableAfter).toBe(available - amount)
      } else {
        expect(amount > available).toBe(true)
        expect(decision.reason).toBe(amount > free ? "insufficient_funds" : "allowance_exceeded")
      }
    }
  )

  it("a card is valid through the last instant of its expiry month (UTC)", () => {
    expect(isExpired("11/26", Date.UTC(2026, 10, 30, 23, 59, 59, 999))).toBe(false)
    expect(isExpired("11/26", Date.UTC(2026, 11, 1))).toBe(true)
    expect(isExpired("12/26", Date.UTC(2026, 11, 31, 23))).toBe(false)
    expect(isExpired("12/26", Date.UTC(2027, 0, 1))).toBe(true)
    expect(isExpired("13/26", AT)).toBe(true)
  })

  it.prop(
    "the limit windows hold the instant and start a UTC day and month",
    [FastCheck.integer({ min: 0, max: 4e12 })],
    ([at]) => {
      const { dayStart, monthStart } = limitWindows(at)
      expect(monthStart <= dayStart && dayStart <= at && at - dayStart < 86_400_000).toBe(true)
      expect(new Date(dayStart).getUTCHours()).toBe(0)
      expect(new Date(monthStart).getUTCDate()).toBe(1)
    }
  )
})

describe("a transaction's events", () => {
  const approved: Amounts = { approved: usd(20), held: usd(20), cleared: 0n, status: "pending" }
  const event = FastCheck.record({
    type: FastCheck.constantFrom<LifecycleEvent["type"]>("adjustment", "reversal", "expiry", "clearing", "refund"),
    amount: micros
  })

  it.prop(
    "amounts never go below zero, and a hold never grows but by an adjustment",
    [FastCheck.array(event, { maxLength: 8 })],
    ([events]) => {
      let amounts = approved
      for (const next of events) {
        const after = applyEvent(amounts, next)
        expect(after.held >= 0n && after.cleared >= 0n && after.approved >= 0n).toBe(true)
        if (next.type !== "adjustment") expect(after.held <= amounts.held).toBe(true)
        if (next.type === "clearing") expect(after.cleared).toBe(amounts.cleared + next.amount)
        if (next.type === "refund") expect(after).toEqual(amounts)
        amounts = after
      }
      expect(settle(amounts).held).toBe(0n)
    }
  )

  it("a whole reversal reverses, a partial one keeps it pending; an expiry expires an uncleared one", () => {
    expect(applyEvent(approved, { type: "reversal", amount: usd(20) })).toMatchObject({ held: 0n, status: "reversed" })
    expect(applyEvent(approved, { type: "reversal", amount: usd(5) })).toMatchObject({
      held: usd(15),
      status: "pending"
    })
    expect(applyEvent(approved, { type: "expiry", amount: 0n })).toMatchObject({ held: 0n, status: "expired" })
    const cleared = applyEvent(approved, { type: "clearing", amount: usd(23) })
    expect(cleared).toMatchObject({ held: 0n, cleared: usd(23), status: "pending" })
    expect(applyEvent(cleared, { type: "expiry", amount: 0n })).toMatchObject({ status: "pending" })
  })
})
