import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import {
  agentRules,
  ceilCents,
  type Decision,
  type DecisionInput,
  decide,
  type TokenHolding
} from "../../src/agent/Decide.js"
import { typicalCardPayment } from "../../src/agent/Forecast.js"
import { calendarStatus } from "../../src/market/Calendar.js"
import { committedInput, decisionInput, extendedHoursInstant, usd } from "./arbitraries.js"

/** Inputs in extended hours with the card below the floor and no cash: token refills or holds. */
const extendedHoursLowCard = decisionInput({
  at: extendedHoursInstant,
  cardUsd1: usd(12),
  walletUsd1: FastCheck.constant(0)
})

const tokenOf = (input: DecisionInput, symbol: string) => input.tokens.find((t) => t.symbol === symbol)

const tradable = (token: TokenHolding | undefined): boolean => {
  const status = token?.market?.status
  return (
    status?.openState === true &&
    status.reasonCode === "TRADING" &&
    status.marketStatus !== null &&
    !["pause", "paused", "closed"].includes(status.marketStatus)
  )
}

/** What the sold position was worth. */
const soldValue = (input: DecisionInput, decision: Decision & { symbol: string }): number => {
  if (decision.symbol === "USD1") return input.walletUsd1
  const token = tokenOf(input, decision.symbol)!
  return token.balance * token.market!.tokenPrice
}

const regularAt = (at: number) => calendarStatus(at).session === "regular"
const runs = { fastCheck: { numRuns: 400 } }

describe("decide, over random inputs", () => {
  it.prop(
    "never trades a token that is paused, closed, not open, not TRADING or without a price",
    [FastCheck.oneof(decisionInput(), extendedHoursLowCard)],
    ([input]) => {
      const decision = decide(input)
      if (decision.action === "refill" && decision.symbol !== "USD1") {
        expect(tradable(tokenOf(input, decision.symbol))).toBe(true)
      }
      if (decision.action === "rebalance") {
        if (decision.symbol !== "USD1") expect(tradable(tokenOf(input, decision.symbol))).toBe(true)
        expect(tradable(tokenOf(input, decision.buySymbol))).toBe(true)
      }
    },
    runs
  )

  it.prop(
    "a refill or rebalance moves at least $5 and at most what the sold position is worth",
    [decisionInput()],
    ([input]) => {
      const decision = decide(input)
      if (decision.action === "refill" || decision.action === "rebalance") {
        expect(decision.usd).toBeGreaterThanOrEqual(agentRules.minTradeUsd)
        expect(decision.usd).toBeLessThanOrEqual(soldValue(input, decision) + 1e-9)
      }
    },
    runs
  )

  it.prop(
    "no refill nor hold when the card holds at least max(need, floor); a refill covers the shortfall",
    [decisionInput()],
    ([input]) => {
      const decision = decide(input)
      const required = Math.max(decision.needUsd, agentRules.floorUsd)
      if (input.cardUsd1 >= required) expect(["none", "rebalance"]).toContain(decision.action)
      if (decision.action === "refill" && regularAt(input.at)) {
        expect(decision.usd).toBe(ceilCents(Math.max(required - input.cardUsd1, agentRules.minTradeUsd)))
      }
    },
    runs
  )

  it.prop(
    "outside the regular session: a refill only below the floor, back to the floor, within 1% of the close; no rebalance",
    [FastCheck.oneof(decisionInput(), extendedHoursLowCard)],
    ([input]) => {
      const decision = decide(input)
      if (regularAt(input.at)) return
      expect(decision.action).not.toBe("rebalance")
      if (decision.action !== "refill") return
      expect(input.cardUsd1).toBeLessThan(agentRules.floorUsd)
      expect(decision.usd).toBe(ceilCents(Math.max(agentRules.floorUsd - input.cardUsd1, agentRules.minTradeUsd)))
      if (decision.symbol !== "USD1") {
        const market = tokenOf(input, decision.symbol)!.market!
        expect(market.closeRef).not.toBeNull()
        expect(decision.spread).toBe(market.spreadVsClose)
        expect(Math.abs(decision.spread!)).toBeLessThanOrEqual(agentRules.maxSpreadOutsideRegular)
      }
    },
    runs
  )

  it.prop(
    "in the regular session a refill comes only below the floor or in the last 30 minutes",
    [decisionInput()],
    ([input]) => {
      const decision = decide(input)
      const calendar = calendarStatus(input.at)
      if (decision.action !== "refill" || calendar.session !== "regular") return
      const inWindow = input.at >= calendar.nextCloseTime - agentRules.closeWindowMs
      expect(input.cardUsd1 < agentRules.floorUsd || inWindow).toBe(true)
    },
    runs
  )

  it.prop(
    "the same input gives the same decision, whatever the order of the tokens",
    [decisionInput()],
    ([input]) => {
      const first = decide(input)
      expect(decide(structuredClone(input))).toEqual(first)
      expect(decide({ ...input, tokens: [...input.tokens].reverse() })).toEqual(first)
    },
    runs
  )

  it.prop(
    "horizon is the next open (after the coming close in the regular session); reasons are never empty",
    [decisionInput()],
    ([input]) => {
      const decision = decide(input)
      const calendar = calendarStatus(input.at)
      const expected =
        calendar.session === "regular" ? calendarStatus(calendar.nextCloseTime).nextOpenTime : calendar.nextOpenTime
      expect(decision.horizon).toBe(expected)
      expect(decision.reason.length).toBeGreaterThan(20)
      expect(decision.reason).not.toMatch(/undefined|NaN|null/)
    },
    runs
  )
})

/** The card's funds as docs/agent.md defines them, computed here from the input alone. */
const fundsOf = (input: DecisionInput) => {
  const { allowanceUsd, clearedPendingUsd, heldUsd, owedUsd } = input.commitments!
  const kept = input.cardUsd1 - heldUsd - clearedPendingUsd
  const room =
    allowanceUsd === null ? Number.POSITIVE_INFINITY : Math.max(0, allowanceUsd - heldUsd - clearedPendingUsd)
  const floor = Math.max(agentRules.floorUsd, typicalCardPayment(input.spending.payments, input.at))
  return { kept, room, owedUsd, available: Math.min(kept - owedUsd, room), floor }
}

describe("decide, counting the card's holds, pending clearings, owed amount and allowance", () => {
  it.prop(
    "a card that owes is repaid at once, in any session: exactly what it owes goes to the program first, or a hold says why not",
    [committedInput()],
    ([input]) => {
      const decision = decide(input)
      const { owedUsd } = input.commitments!
      if (owedUsd === 0) {
        if (decision.action === "refill") expect(decision.repayUsd).toBe(0)
        return
      }
      expect(["refill", "hold"]).toContain(decision.action)
      if (decision.action !== "refill") return
      expect(decision.repayUsd).toBe(owedUsd)
      expect(decision.usd).toBeGreaterThanOrEqual(owedUsd)
      expect(decision.usd).toBeGreaterThanOrEqual(agentRules.minTradeUsd)
      expect(decision.reason).toContain("repays the card program")
    },
    runs
  )

  it.prop(
    "nothing is refilled while the available funds cover max(need, floor, typical card payment) and nothing is owed",
    [committedInput()],
    ([input]) => {
      const decision = decide(input)
      const { available, floor, owedUsd } = fundsOf(input)
      if (owedUsd === 0 && available >= Math.max(decision.needUsd, floor)) {
        expect(["none", "rebalance"]).toContain(decision.action)
      }
    },
    runs
  )

  it.prop(
    "below the floor or the typical card payment the card is refilled now, in any session, unless only the allowance limits it",
    [committedInput()],
    ([input]) => {
      const decision = decide(input)
      const { available, floor, kept, room } = fundsOf(input)
      if (available < floor && Math.min(floor, room) > kept) expect(["refill", "hold"]).toContain(decision.action)
    },
    runs
  )

  it.prop(
    "a refill repays what is owed and brings the available funds to the session's target, within the allowance, at least $5",
    [committedInput()],
    ([input]) => {
      const decision = decide(input)
      if (decision.action !== "refill") return
      const { floor, kept, owedUsd, room } = fundsOf(input)
      const calendar = calendarStatus(input.at)
      // Outside the regular session only the floor; a repayment alone tops up to the floor at most.
      const target =
        calendar.session === "regular" && decision.rule !== "REPAY_OWED" ? Math.max(decision.needUsd, floor) : floor
      const topUp = Math.max(0, Math.min(target, room) - kept)
      expect(decision.usd).toBe(ceilCents(Math.max(owedUsd + topUp, agentRules.minTradeUsd)))
      // After it: nothing owed, and the card's funds reach the target as far as the allowance lets them.
      expect(kept + decision.usd - owedUsd).toBeGreaterThanOrEqual(Math.min(target, room) - 1e-9)
    },
    runs
  )

  it.prop(
    "the same input with commitments gives the same decision, and its reasons read well",
    [committedInput()],
    ([input]) => {
      const decision = decide(input)
      expect(decide(structuredClone(input))).toEqual(decision)
      expect(decision.reason).not.toMatch(/undefined|NaN|null|Infinity/)
    },
    runs
  )
})
