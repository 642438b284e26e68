/**
 * Where a user stands: the identity-check state and the card, as `GET /me`, sign-in and the event
 * stream's first frame show them. One statement, which also claims a due look at the identity
 * provider while a check is pending (at most one per user per window, as `Kyc.reconcile`); when it
 * won the claim, the provider is asked and the standing read again.
 */
import { Clock, Effect } from "effect"
import { Cards } from "../cards/Cards.js"
import type { Address } from "../chain/Address.js"
import { Kyc } from "../kyc/Kyc.js"
import type { KycState } from "../kyc/KycState.js"
import { traced } from "../observability/Traced.js"
import { AccountRepo } from "./AccountRepo.js"

export class Standing extends Effect.Service<Standing>()("app/Standing", {
  effect: Effect.gen(function* () {
    const repo = yield* AccountRepo
    const kyc = yield* Kyc
    const cards = yield* Cards

    const of = traced("Standing.of")(function* (address: Address) {
      yield* Effect.annotateCurrentSpan("user.address", address)
      const now = yield* Clock.currentTimeMillis
      let found = yield* repo.standing(kyc.claimAt(address, now))
      if (found.claimedSessionId !== null) {
        yield* kyc.askProvider(address, found.claimedSessionId, now)
        // The claim just made is not due again: this read claims nothing.
        found = yield* repo.standing(kyc.claimAt(address, now))
      }
      const state: KycState = found.status ?? "none"
      return { kyc: state, card: found.card === null ? null : yield* cards.reveal(found.card) }
    })

    return { of }
  }),
  dependencies: [AccountRepo.Default]
}) {}
