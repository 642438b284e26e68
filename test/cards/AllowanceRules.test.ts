import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { ALLOWANCE_STATES, allowanceFigures, allowanceState, lesser } from "../../src/cards/Allowance.js"

const NOW = Date.UTC(2026, 10, 28, 12)
const amount = FastCheck.bigInt({ min: 0n, max: 10n ** 15n })

describe("the spending allowance's rules", () => {
  it("none, expired, pending, revoked and active, in that order of precedence", () => {
    const signed = { cap: 100n, deadline: NOW + 1, seenOnChain: true, forThisProgram: true }
    const state = (overrides: Partial<typeof signed> | undefined, onChain = 100n) =>
      allowanceState({ signed: overrides === undefined ? undefined : { ...signed, ...overrides }, onChain, now: NOW })
    expect(state(undefined)).toBe("none")
    expect(state({ forThisProgram: false, deadline: NOW })).toBe("none")
    expect(state({ deadline: NOW, seenOnChain: false }, 0n)).toBe("expired")
    expect(state({ seenOnChain: false }, 0n)).toBe("pending")
    expect(state({}, 0n)).toBe("revoked")
    expect(state({}, 1n)).toBe("active")
  })

  it.prop(
    "what remains is within the cap, the token's allowance and what is not committed, and only while active",
    [amount, amount, amount, amount, FastCheck.constantFrom(...ALLOWANCE_STATES)],
    ([cap, onChain, held, clearedPending, state]) => {
      const { used, remaining } = allowanceFigures({ state, cap, onChain, committed: { held, clearedPending } })
      const allowed = lesser(onChain, cap)
      expect(remaining >= 0n).toBe(true)
      expect(remaining <= allowed).toBe(true)
      expect(used >= held + clearedPending).toBe(true)
      if (state !== "active") expect(remaining).toBe(0n)
      else if (held + clearedPending <= allowed) expect(used + remaining).toBe(cap)
      else expect(remaining).toBe(0n)
    }
  )
})
