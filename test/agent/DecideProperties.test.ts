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
import { calendarStatus } from "../../src/market/Calendar.js"
import { decisionInput, extendedHoursInstant, usd } from "./arbitraries.js"

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
