import { describe, expect, it } from "@effect/vitest"
import { decide, withoutStrategy } from "../../src/agent/Decide.js"
import { marketStatusAt } from "../../src/market/Calendar.js"
import { et, inputAt, strategy, tokenAt } from "./fixtures.js"

// Unless a test says otherwise: card issued at the decision instant, so the forecast is $10 a day; the agent
// wallet holds $520 of NVDA and $480 of TSLA (targets 50/50), no USD1 cash; every token at its close reference.

describe("overnight session (Tuesday 2026-11-24 02:00 ET)", () => {
  const at = et("2026-11-24", "02:00")
  const tokens = (nvdaSpread: number | null, tslaSpread: number | null) => [
    tokenAt("NVDA", at, { valueUsd: 520, spread: nvdaSpread }),
    tokenAt("TSLA", at, { valueUsd: 480, spread: tslaSpread })
  ]

  it("refills $7 (back to the floor) from the token within 1% of its close, not the more overweight one", () => {
    expect(marketStatusAt(at).marketStatus).toBe("overnight")
    expect(decide(inputAt(at, { cardUsd1: 3, tokens: tokens(0.025, 0.004) }))).toEqual({
      action: "refill",
      rule: "REFILL_BELOW_FLOOR_OUTSIDE_REGULAR",
      symbol: "TSLA",
      usd: 7,
      repayUsd: 0,
      spread: 0.004,
      // 7.5 hours to the open at $10 a day, × 1.2
      needUsd: 3.75,
      horizon: et("2026-11-24", "09:30"),
      reason:
        "The card holds $3.00, below the $10.00 floor; outside the regular session the agent only restores the floor. " +
        "The agent sells $7.00 of TSLA (weight 48.0%, target 50.0%); it trades +0.40% from its last close."
    })
  })

  it("holds when every spread is 2.5%, naming the next open", () => {
    expect(decide(inputAt(at, { cardUsd1: 3, tokens: tokens(0.025, -0.025) }))).toEqual({
      action: "hold",
      rule: "SPREAD_GUARD",
      // The refill that waits.
      usd: 7,
      needUsd: 3.75,
      horizon: et("2026-11-24", "09:30"),
      reason:
        "The card holds $3.00, below the $10.00 floor. A refill of $7.00 cannot be made now: " +
        "NVDA trades +2.50% from its last close, more than the 1% allowed outside the regular session; " +
        "TSLA trades -2.50% from its last close, more than the 1% allowed outside the regular session. " +
        "The next regular session opens Tue Nov 24, 09:30 ET."
    })
  })

  it("a spread of exactly 1% is allowed", () => {
    const decision = decide(inputAt(at, { cardUsd1: 3, tokens: tokens(0.025, -0.01) }))
    expect(decision).toMatchObject({ action: "refill", symbol: "TSLA", spread: -0.01 })
  })

  it("never sells a token without a close reference outside the regular session", () => {
    const decision = decide(inputAt(at, { cardUsd1: 3, tokens: tokens(null, 0.025) }))
    expect(decision).toMatchObject({ action: "hold", rule: "SPREAD_GUARD" })
    expect(decision.reason).toContain("NVDA has no close reference yet")
  })

  it("refills only the floor outside the regular session, however large the forecast", () => {
    const heavySpender = { ...strategy, weeklySpendUsd: 7000 }
    const decision = decide(inputAt(at, { cardUsd1: 3, strategy: heavySpender, tokens: tokens(0, 0) }))
    expect(decision).toMatchObject({ action: "refill", usd: 7, needUsd: 375 })
  })

  it("refills at least $5 when the card is just under the floor", () => {
    expect(decide(inputAt(at, { cardUsd1: 9.5, tokens: tokens(0, 0) }))).toMatchObject({ action: "refill", usd: 5 })
  })

  it("does nothing above the floor, even when short of the forecast", () => {
    const decision = decide(inputAt(at, { cardUsd1: 12, strategy: { ...strategy, weeklySpendUsd: 700 } }))
    expect(decision).toMatchObject({ action: "none", rule: "OUTSIDE_REGULAR_SESSION", needUsd: 37.5 })
    expect(decision.reason).toBe(
      "The card holds $12.00 and needs $37.50 until Tue Nov 24, 09:30 ET. " +
        "It is above the $10.00 floor, so the refill waits for the regular session, which opens Tue Nov 24, 09:30 ET."
    )
  })
})

describe("weekend (Saturday 2026-11-28 15:00 UTC)", () => {
  const at = Date.parse("2026-11-28T15:00:00Z")

  it("holds when the card is below the floor, saying when trading resumes", () => {
    expect(decide(inputAt(at, { cardUsd1: 3 }))).toEqual({
      action: "hold",
      rule: "NOT_TRADING",
      usd: 7,
      // Sat 10:00 ET to Mon 09:30 ET: 14/24 + 1 + 9.5/24 days
      needUsd: 23.75,
      horizon: et("2026-11-30", "09:30"),
      reason:
        "The card holds $3.00, below the $10.00 floor. A refill of $7.00 cannot be made now: " +
        "NVDA and TSLA are closed for the weekend. The market is closed; trading resumes Sun Nov 29, 20:00 ET " +
        "(overnight session) and the regular session opens Mon Nov 30, 09:30 ET."
    })
  })

  it("pays a refill from the wallet's USD1 cash even while nothing trades", () => {
    expect(decide(inputAt(at, { cardUsd1: 3, walletUsd1: 7 }))).toMatchObject({
      action: "refill",
      rule: "REFILL_BELOW_FLOOR_OUTSIDE_REGULAR",
      symbol: "USD1",
      usd: 7,
      // USD1 is the dollar: no spread.
      spread: 0
    })
  })
})

describe("Friday 2026-11-20, regular session closing at 16:00 ET", () => {
  const inWindow = et("2026-11-20", "15:40")
  const monday = et("2026-11-23", "09:30")

  it("15:40 ET with enough balance: none", () => {
    expect(decide(inputAt(inWindow, { cardUsd1: 100 }))).toEqual({
      action: "none",
      rule: "ENOUGH_BALANCE",
      // 8h20m of Friday + Saturday + Sunday + 9h30m of Monday at $10 a day = $27.43, × 1.2 = $32.92
      needUsd: 32.92,
      horizon: monday,
      reason: "The card holds $100.00, enough for the $32.92 it needs until Mon Nov 23, 09:30 ET and the $10.00 floor."
    })
  })

  it("15:40 ET with too little: refills the shortfall from the most overweight token, horizon Monday's open", () => {
    expect(decide(inputAt(inWindow, { cardUsd1: 20 }))).toEqual({
      action: "refill",
      rule: "REFILL_BEFORE_CLOSE",
      symbol: "NVDA",
      usd: 12.92,
      repayUsd: 0,
      spread: 0,
      needUsd: 32.92,
      horizon: monday,
      reason:
        "The card holds $20.00 but needs $32.92 until Mon Nov 23, 09:30 ET. The agent sells $12.92 of NVDA, " +
        "the holding furthest above its target (weight 52.0%, target 50.0%), before the close at Fri Nov 20, 16:00 ET; " +
        "it trades +0.00% from its last close."
    })
  })

  it("a card holding exactly the need (or the floor) is not refilled", () => {
    expect(decide(inputAt(inWindow, { cardUsd1: 32.92 })).action).toBe("none")
    const noSpend = { ...strategy, weeklySpendUsd: 0 }
    expect(decide(inputAt(inWindow, { cardUsd1: 10, strategy: noSpend }))).toMatchObject({
      action: "none",
      needUsd: 0
    })
    expect(decide(inputAt(inWindow, { cardUsd1: 9.99, strategy: noSpend }))).toMatchObject({
      action: "refill",
      usd: 5
    })
  })

  it("a small shortfall is rounded up to the $5 minimum", () => {
    expect(decide(inputAt(inWindow, { cardUsd1: 30 }))).toMatchObject({ action: "refill", usd: 5 })
  })

  it("the window opens at 15:30 ET", () => {
    expect(decide(inputAt(et("2026-11-20", "15:29"), { cardUsd1: 20 })).rule).toBe("OUTSIDE_CLOSE_WINDOW")
    expect(decide(inputAt(et("2026-11-20", "15:30"), { cardUsd1: 20 })).rule).toBe("REFILL_BEFORE_CLOSE")
    expect(decide(inputAt(et("2026-11-20", "16:00"), { cardUsd1: 20 })).rule).toBe("OUTSIDE_REGULAR_SESSION")
  })

  it("14:00 ET, short but above the floor: none until the close window", () => {
    expect(decide(inputAt(et("2026-11-20", "14:00"), { cardUsd1: 20 }))).toEqual({
      action: "none",
      rule: "OUTSIDE_CLOSE_WINDOW",
      needUsd: 33.75,
      horizon: monday,
      reason:
        "The card holds $20.00 and needs $33.75 until Mon Nov 23, 09:30 ET. It is above the $10.00 floor, " +
        "so the agent refills in the last 30 minutes before the close, from Fri Nov 20, 15:30 ET."
    })
  })

  it("14:00 ET below the floor: refills at once, the whole shortfall", () => {
    expect(decide(inputAt(et("2026-11-20", "14:00"), { cardUsd1: 4 }))).toMatchObject({
      action: "refill",
      rule: "REFILL_BELOW_FLOOR",
      symbol: "NVDA",
      usd: 29.75
    })
  })

  it("uses the wallet's USD1 cash when it covers the refill, else sells a token", () => {
    expect(decide(inputAt(inWindow, { cardUsd1: 20, walletUsd1: 50 }))).toMatchObject({
      action: "refill",
      symbol: "USD1",
      usd: 12.92,
      spread: 0
    })
    expect(decide(inputAt(inWindow, { cardUsd1: 20, walletUsd1: 12.92 }))).toMatchObject({ symbol: "USD1" })
    expect(decide(inputAt(inWindow, { cardUsd1: 20, walletUsd1: 12.91 }))).toMatchObject({
      action: "refill",
      symbol: "NVDA",
      usd: 12.92
    })
  })

  it("never sells a paused token, even the most overweight", () => {
    const tokens = [
      tokenAt("NVDA", inWindow, { valueUsd: 900, paused: true }),
      tokenAt("TSLA", inWindow, { valueUsd: 100 })
    ]
    expect(decide(inputAt(inWindow, { cardUsd1: 20, tokens }))).toMatchObject({ action: "refill", symbol: "TSLA" })

    const targets = { NVDA: 0.4, TSLA: 0.2, AAPL: 0.4 }
    const three = [
      tokenAt("NVDA", inWindow, { valueUsd: 600, paused: true }),
      tokenAt("TSLA", inWindow, { valueUsd: 300 }),
      tokenAt("AAPL", inWindow, { valueUsd: 100 })
    ]
    const decision = decide(inputAt(inWindow, { cardUsd1: 20, strategy: { ...strategy, targets }, tokens: three }))
    expect(decision).toMatchObject({ action: "refill", symbol: "TSLA" })
    expect(decision.reason).toContain(
      "TSLA, the sellable holding furthest above its target (weight 30.0%, target 20.0%)"
    )
  })

  it("ties on overweight go to the smaller |spread|", () => {
    const tokens = [
      tokenAt("NVDA", inWindow, { valueUsd: 500, spread: -0.003 }),
      tokenAt("TSLA", inWindow, { valueUsd: 500, spread: 0.002 })
    ]
    expect(decide(inputAt(inWindow, { cardUsd1: 20, tokens }))).toMatchObject({ symbol: "TSLA", spread: 0.002 })
  })

  it("sells a token without a close reference in the regular session, where its price is its own reference", () => {
    const tokens = [
      tokenAt("NVDA", inWindow, { valueUsd: 520, spread: null }),
      tokenAt("TSLA", inWindow, { valueUsd: 480 })
    ]
    const decision = decide(inputAt(inWindow, { cardUsd1: 20, tokens }))
    expect(decision).toMatchObject({ symbol: "NVDA", spread: 0 })
    // The reason claims no last close it does not have.
    expect(decision.reason).not.toContain("from its last close")
  })

  it("sells only a position worth the whole refill", () => {
    const tokens = [tokenAt("NVDA", inWindow, { valueUsd: 12 }), tokenAt("TSLA", inWindow, { valueUsd: 8 })]
    const decision = decide(inputAt(inWindow, { cardUsd1: 20, walletUsd1: 3, tokens }))
    expect(decision).toEqual({
      action: "hold",
      rule: "POSITION_TOO_SMALL",
      usd: 12.92,
      needUsd: 32.92,
      horizon: monday,
      reason:
        "The card holds $20.00 but needs $32.92 until Mon Nov 23, 09:30 ET. A refill of $12.92 cannot be made now: " +
        "NVDA is worth only $12.00; TSLA is worth only $8.00, and the wallet's $3.00 USD1 cash is not enough. " +
        "The regular session closes Fri Nov 20, 16:00 ET; the next one opens Mon Nov 23, 09:30 ET."
    })
  })

  it("holds when every held token is paused, and when the wallet is empty", () => {
    const paused = [
      tokenAt("NVDA", inWindow, { valueUsd: 520, paused: true }),
      tokenAt("TSLA", inWindow, { valueUsd: 480, paused: true })
    ]
    const decision = decide(inputAt(inWindow, { cardUsd1: 20, tokens: paused }))
    expect(decision).toMatchObject({ action: "hold", rule: "NOT_TRADING" })
    expect(decision.reason).toContain("NVDA and TSLA are paused on their platform")

    const empty = [tokenAt("NVDA", inWindow), tokenAt("TSLA", inWindow)]
    const nothing = decide(inputAt(inWindow, { cardUsd1: 20, tokens: empty }))
    expect(nothing).toMatchObject({ action: "hold", rule: "NOTHING_TO_SELL" })
    expect(nothing.reason).toContain("the agent wallet holds no tokens and no USD1 cash")
  })

  it("never sells a token whose price is unavailable, nor one the calendar and platform disagree on", () => {
    const noPrice = { symbol: "NVDA", balance: 9, market: null }
    const notTrading = tokenAt("TSLA", inWindow, { valueUsd: 480 })
    const limited = {
      ...notTrading,
      market: { ...notTrading.market!, status: { ...notTrading.market!.status, reasonCode: "ASSET_LIMITED" } }
    }
    const decision = decide(inputAt(inWindow, { cardUsd1: 20, tokens: [noPrice, limited] }))
    expect(decision).toMatchObject({ action: "hold", rule: "NOT_TRADING" })
    expect(decision.reason).toContain("TSLA is not trading (ASSET_LIMITED); NVDA has no price right now")
  })
})

describe("day after Thanksgiving (Friday 2026-11-27, close at 13:00 ET)", () => {
  const monday = et("2026-11-30", "09:30")

  it("12:45 ET is inside the last 30 minutes: refills when short", () => {
    expect(decide(inputAt(et("2026-11-27", "12:45"), { cardUsd1: 20 }))).toMatchObject({
      action: "refill",
      rule: "REFILL_BEFORE_CLOSE",
      symbol: "NVDA",
      horizon: monday
    })
  })

  it("12:29 ET is before the window, 13:00 ET is after the session", () => {
    const early = decide(inputAt(et("2026-11-27", "12:29"), { cardUsd1: 20 }))
    expect(early).toMatchObject({ action: "none", rule: "OUTSIDE_CLOSE_WINDOW", horizon: monday })
    expect(early.reason).toContain("from Fri Nov 27, 12:30 ET")
    expect(decide(inputAt(et("2026-11-27", "13:00"), { cardUsd1: 20 })).rule).toBe("OUTSIDE_REGULAR_SESSION")
  })
})

describe("Wednesday 2026-11-25 21:00 ET, no overnight session before Thanksgiving", () => {
  const at = et("2026-11-25", "21:00")

  it("holds with the card at $3: nothing trades until Friday", () => {
    const decision = decide(inputAt(at, { cardUsd1: 3 }))
    expect(marketStatusAt(at)).toMatchObject({ openState: false, marketStatus: "closed", reasonCode: "HOLIDAY" })
    expect(decision).toMatchObject({ action: "hold", rule: "NOT_TRADING", horizon: et("2026-11-27", "09:30") })
    expect(decision.reason).toContain("NVDA and TSLA are closed for a market holiday")
    expect(decision.reason).toContain(
      "trading resumes Fri Nov 27, 04:00 ET (premarket) and the regular session opens Fri Nov 27, 09:30 ET"
    )
  })
})

describe("first EDT Monday (2027-03-15)", () => {
  const premarket = Date.parse("2027-03-15T13:20:00Z")
  const open = Date.parse("2027-03-15T13:30:00Z")
  const wide = (at: number) => [
    tokenAt("NVDA", at, { valueUsd: 520, spread: 0.025 }),
    tokenAt("TSLA", at, { valueUsd: 480, spread: 0.025 })
  ]

  it("13:20 UTC is premarket: the spread guard holds, horizon the 13:30 UTC open", () => {
    const decision = decide(inputAt(premarket, { cardUsd1: 3, tokens: wide(premarket) }))
    expect(decision).toMatchObject({ action: "hold", rule: "SPREAD_GUARD", horizon: open })
    expect(decision.reason).toContain("The next regular session opens Mon Mar 15, 09:30 ET.")
  })

  it("13:30 UTC is the open: the whole shortfall is refilled whatever the spread", () => {
    expect(decide(inputAt(open, { cardUsd1: 3, tokens: wide(open) }))).toMatchObject({
      action: "refill",
      rule: "REFILL_BELOW_FLOOR",
      symbol: "NVDA",
      // one weekday to Tuesday's open at $10, × 1.2 = $12; $12 - $3
      usd: 9,
      needUsd: 12,
      spread: 0.025,
      horizon: Date.parse("2027-03-16T13:30:00Z")
    })
  })
})

describe("rebalance", () => {
  const friday = et("2026-11-20", "11:00")
  const holdings = (at: number, nvda: number, tsla: number, nvdaPaused = false) => [
    tokenAt("NVDA", at, { valueUsd: nvda, paused: nvdaPaused }),
    tokenAt("TSLA", at, { valueUsd: tsla })
  ]

  it("in the regular session, more than 5 points off: sells the most overweight, buys the most underweight", () => {
    expect(decide(inputAt(friday, { tokens: holdings(friday, 700, 300) }))).toEqual({
      action: "rebalance",
      rule: "REBALANCE_DRIFT",
      symbol: "NVDA",
      buySymbol: "TSLA",
      usd: 200,
      spread: 0,
      needUsd: 35.25,
      horizon: et("2026-11-23", "09:30"),
      reason:
        "TSLA is more than 5 points off its target. The agent sells $200.00 of NVDA " +
        "(weight 70.0%, target 50.0%) to buy TSLA (weight 30.0%, target 50.0%)."
    })
    expect(decide(inputAt(friday, { tokens: holdings(friday, 560, 440) }))).toMatchObject({
      action: "rebalance",
      usd: 60
    })
  })

  it("within 5 points (5 included): none", () => {
    expect(decide(inputAt(friday, { tokens: holdings(friday, 540, 460) })).rule).toBe("ENOUGH_BALANCE")
    expect(decide(inputAt(friday, { tokens: holdings(friday, 550, 450) })).rule).toBe("ENOUGH_BALANCE")
  })

  it("never outside the regular session", () => {
    for (const at of [et("2026-11-20", "08:00"), et("2026-11-20", "17:00"), et("2026-11-21", "11:00")]) {
      const decision = decide(inputAt(at, { tokens: holdings(at, 700, 300) }))
      expect(decision).toMatchObject({ action: "none", rule: "OUTSIDE_REGULAR_SESSION" })
      expect(decision.reason).toContain("rebalancing waits for the regular session")
    }
  })

  it("a refill and a rebalance that both wait say so", () => {
    const saturday = et("2026-11-21", "11:00")
    const waiting = decide(inputAt(saturday, { cardUsd1: 20, tokens: holdings(saturday, 700, 300) }))
    expect(waiting).toMatchObject({ action: "none", rule: "OUTSIDE_REGULAR_SESSION" })
    expect(waiting.reason).toBe(
      "The card holds $20.00 and needs $23.25 until Mon Nov 23, 09:30 ET. It is above the $10.00 floor, so the refill " +
        "waits for the regular session, which opens Mon Nov 23, 09:30 ET. TSLA is off its target by more than 5 points " +
        "(weight 30.0%, target 50.0%); rebalancing waits for the regular session, which opens Mon Nov 23, 09:30 ET."
    )
    const blocked = decide(inputAt(friday, { cardUsd1: 20, tokens: holdings(friday, 700, 300, true) }))
    expect(blocked).toMatchObject({ action: "none", rule: "OUTSIDE_CLOSE_WINDOW" })
    expect(blocked.reason).toContain(
      "but no position above its target can be sold now: NVDA is paused on its platform."
    )
  })

  it("a due refill comes first; a refill that is not due yet does not stop a rebalance", () => {
    const closing = et("2026-11-20", "15:45")
    expect(decide(inputAt(closing, { cardUsd1: 20, tokens: holdings(closing, 700, 300) }))).toMatchObject({
      action: "refill",
      symbol: "NVDA"
    })
    expect(decide(inputAt(friday, { cardUsd1: 20, tokens: holdings(friday, 700, 300) })).action).toBe("rebalance")
  })

  it("invests overweight USD1 cash in the most underweight token", () => {
    const decision = decide(inputAt(friday, { walletUsd1: 200, tokens: holdings(friday, 420, 380) }))
    expect(decision).toMatchObject({ action: "rebalance", symbol: "USD1", buySymbol: "TSLA", usd: 120, spread: 0 })
    expect(decision.reason).toContain("The agent invests $120.00 of USD1 cash (weight 20.0%, target 0.0%) to buy TSLA")
  })

  it("buys a target the wallet does not hold yet", () => {
    const tokens = [...holdings(friday, 500, 500), tokenAt("AAPL", friday)]
    const targets = { NVDA: 0.4, TSLA: 0.4, AAPL: 0.2 }
    expect(decide(inputAt(friday, { strategy: { ...strategy, targets }, tokens }))).toMatchObject({
      action: "rebalance",
      symbol: "NVDA",
      buySymbol: "AAPL",
      usd: 100
    })
  })

  it("is blocked, not redirected, when the position that needs it cannot trade", () => {
    const paused = decide(inputAt(friday, { tokens: holdings(friday, 700, 300, true) }))
    expect(paused).toMatchObject({ action: "none", rule: "REBALANCE_BLOCKED" })
    expect(paused.reason).toContain("no position above its target can be sold now: NVDA is paused on its platform")

    // NVDA 12 points under and paused; every other position within 5 points: trading them would only churn.
    const targets = { NVDA: 0.4, TSLA: 0.15, AAPL: 0.15, MSFT: 0.15, SPY: 0.15 }
    const tokens = [
      tokenAt("NVDA", friday, { valueUsd: 280, paused: true }),
      tokenAt("TSLA", friday, { valueUsd: 197 }),
      tokenAt("AAPL", friday, { valueUsd: 197 }),
      tokenAt("MSFT", friday, { valueUsd: 196 }),
      tokenAt("SPY", friday, { valueUsd: 130 })
    ]
    const churn = decide(inputAt(friday, { strategy: { ...strategy, targets }, tokens }))
    expect(churn).toMatchObject({ action: "none", rule: "REBALANCE_BLOCKED" })
    expect(churn.reason).toContain(
      "NVDA is off its target by more than 5 points (weight 28.0%, target 40.0%), but NVDA is paused on its platform."
    )
  })

  it("trades another out-of-band position when the worst one cannot trade", () => {
    const targets = { NVDA: 0.4, AAPL: 0.2, TSLA: 0.2, MSFT: 0.2 }
    const tokens = [
      tokenAt("NVDA", friday, { valueUsd: 250, paused: true }),
      tokenAt("AAPL", friday, { valueUsd: 280 }),
      tokenAt("TSLA", friday, { valueUsd: 290 }),
      tokenAt("MSFT", friday, { valueUsd: 180 })
    ]
    const decision = decide(inputAt(friday, { strategy: { ...strategy, targets }, tokens }))
    expect(decision).toMatchObject({ action: "rebalance", symbol: "TSLA", buySymbol: "MSFT", usd: 20 })
    expect(decision.reason).toBe(
      "TSLA is more than 5 points off its target. The agent sells $20.00 of TSLA (weight 29.0%, target 20.0%) " +
        "to buy MSFT (weight 18.0%, target 20.0%)."
    )
  })

  it("is blocked while a held token has no price, or when the trade would be under $5", () => {
    const unpriced = [tokenAt("NVDA", friday, { valueUsd: 700 }), { symbol: "TSLA", balance: 3, market: null }]
    const decision = decide(inputAt(friday, { tokens: unpriced }))
    expect(decision).toMatchObject({ action: "none", rule: "REBALANCE_BLOCKED" })
    expect(decision.reason).toContain("the weights are uncertain: TSLA has no price right now")

    const small = decide(inputAt(friday, { tokens: holdings(friday, 14, 6) }))
    expect(small).toMatchObject({ action: "none", rule: "REBALANCE_BLOCKED" })
    expect(small.reason).toContain("would be $4.00, under the $5.00 minimum")
  })
})

it("the forecast uses the strategy's spending history: a card with no payments for 28 days needs nothing", () => {
  const at = et("2026-11-20", "15:40")
  const old = { cardCreatedAt: Date.parse("2026-01-01T00:00:00Z"), payments: [] }
  expect(decide(inputAt(at, { cardUsd1: 10, spending: old }))).toMatchObject({ action: "none", needUsd: 0 })
})

describe("a card without a strategy", () => {
  const friday = et("2026-11-20", "15:40")

  it("is decided none (NO_STRATEGY): nothing is done, the need forecast from its own payments alone", () => {
    // $14 at noon on each of the 20 weekdays of the 28-day lookback (Oct 23 to Nov 19), nothing at weekends.
    const payments = Array.from({ length: 28 }, (_, i) => new Date(Date.UTC(2026, 9, 23 + i)))
      .filter((day) => day.getUTCDay() !== 0 && day.getUTCDay() !== 6)
      .map((day) => ({ at: et(day.toISOString().slice(0, 10), "12:00"), usd: 14 }))
    expect(payments).toHaveLength(20)
    expect(withoutStrategy({ at: friday, spending: { cardCreatedAt: et("2026-10-01", "09:00"), payments } })).toEqual({
      action: "none",
      rule: "NO_STRATEGY",
      // 8h20m of Friday + 9h30m of Monday at $14 a weekday = $10.40, × 1.2 = $12.49 (rounded up)
      needUsd: 12.49,
      horizon: et("2026-11-23", "09:30"),
      reason:
        "The card has no strategy yet, so the agent does nothing for it until one is set (PUT /strategy). " +
        "Its own payments forecast a need of $12.49 until Mon Nov 23, 09:30 ET."
    })
  })

  it("a new card without payments needs nothing: no weekly estimate stands in for its history", () => {
    expect(withoutStrategy({ at: friday, spending: { cardCreatedAt: friday, payments: [] } })).toMatchObject({
      action: "none",
      rule: "NO_STRATEGY",
      needUsd: 0
    })
  })
})
