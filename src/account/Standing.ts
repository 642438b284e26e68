/**
 * Where a user stands: the identity-check state and the card, as `GET /me`, sign-in and the event
 * stream's first frame show them. One statement, a read; only while a check is pending and a look
 * at the identity provider is due does it claim that look (`Kyc.reconcile`: at most one caller per
 * user per window, across replicas), and the caller that won it asks the provider and reads again.
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
      const look = kyc.lookAt(address, yield* Clock.currentTimeMillis)
      let found = yield* repo.standing(look)
      if (found.lookDue && (yield* kyc.reconcile(address))) {
        // The look just claimed is not due again: this read is the answer after it.
        found = yield* repo.standing(look)
      }
      const state: KycState = found.status ?? "none"
      return {
        kyc: state,
        card: found.card === null ? null : yield* cards.reveal(found.card),
        owedUsd: Number(found.owedMicros) / 1_000_000
      }
    })

    return { of }
  }),
  dependencies: [AccountRepo.Default]
}) {}
