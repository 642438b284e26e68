/** `npm run demo` walks the whole product on embedded defaults and exits 0, naming every step. */
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { runToExit } from "../support/process.js"

// The steps the issue asks the demo to walk, written out rather than imported from scripts/demo.ts:
// a step dropped or renamed there must fail this test.
const STEPS = [
  "start the service",
  "sign in with the card key",
  "open the event stream",
  "identity check on the sandbox page",
  "card issued",
  "sign the card's spending allowance",
  "buy a coffee with the card",
  "set the agent's strategy",
  "portfolio",
  "pay an order with the card key (x402)",
  "statement shows the payment",
  "the card runs low; the agent refills it on chain",
  "statement shows the refill",
  "preview: Friday 15:40 ET",
  "preview: Saturday noon ET",
  "decision log"
]

it.live(
  "npm run demo completes every step",
  () =>
    Effect.gen(function* () {
      const { code, output } = yield* runToExit("npm", ["run", "demo"])
      expect(code, output).toBe(0)
      STEPS.forEach((step, i) => {
        expect(output).toMatch(new RegExp(`\\[\\s*${i + 1}/${STEPS.length}\\] ${step.replace(/[()]/g, "\\$&")}`))
      })
      // The allowance: signed through the API, active once the chain took it.
      expect(output).toMatch(/sign the card's spending allowance .*: active, cap \$100\.00, spender 0x[0-9a-fA-F]{40}/)
      // The coffee: approved at the sandbox network, pending on the statement, listed with its hold.
      expect(output).toMatch(
        /buy a coffee with the card .*\$4\.50 at Corner Coffee \(MCC 5814\) approved, authorization [\w-]+.*; statement: card_payment \$4\.50 pending; GET \/card\/authorizations: held \$4\.50/
      )
      expect(output).toMatch(/refill executed/)
      expect(output).toContain("demo complete")
    }),
  300_000
)
