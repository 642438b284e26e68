import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { accountStateOf, advances, canStartSession, type SessionStatus } from "../../src/kyc/KycState.js"

const statuses: ReadonlyArray<SessionStatus> = ["pending", "approved", "declined", "duplicate", "expired"]
const terminal = statuses.filter((s) => s !== "pending")

/** Folds events the way Kyc.apply does: a move only when it advances. */
const fold = (events: ReadonlyArray<SessionStatus>) =>
  events.reduce<SessionStatus>((current, next) => (advances(current, next) ? next : current), "pending")

describe("session state machine", () => {
  it("moves only from pending to a terminal result", () => {
    for (const from of statuses) {
      for (const to of statuses) {
        expect(advances(from, to), `${from} -> ${to}`).toBe(from === "pending" && to !== "pending")
      }
    }
  })

  it.prop(
    "the final result wins whatever the order of pending events around it",
    [
      FastCheck.constantFrom(...terminal),
      FastCheck.nat({ max: 10 }),
      FastCheck.nat({ max: 10 }),
      FastCheck.nat({ max: 10 })
    ],
    ([result, before, after, repeats]) => {
      const events: Array<SessionStatus> = [
        ...Array.from({ length: before }, () => "pending" as const),
        result,
        ...Array.from({ length: after }, () => "pending" as const),
        ...Array.from({ length: repeats }, () => result)
      ]
      expect(fold(events)).toBe(result)
    }
  )

  it.prop(
    "the first terminal result is never replaced",
    [FastCheck.array(FastCheck.constantFrom(...statuses), { minLength: 1, maxLength: 20 })],
    ([events]) => {
      const firstTerminal = events.find((s) => s !== "pending") ?? "pending"
      expect(fold(events)).toBe(firstTerminal)
    }
  )

  it("maps a session's result onto the user's state", () => {
    expect(statuses.map(accountStateOf)).toEqual(["pending", "approved", "declined", "duplicate", "none"])
    expect((["none", "pending", "approved", "declined", "duplicate"] as const).filter(canStartSession)).toEqual([
      "none",
      "declined"
    ])
  })
})
