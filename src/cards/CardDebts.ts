/**
 * What cards owe the card program, as the agent sees it: a clearing the settlement account could not
 * debit from the card wallet is owed (the settlement engine writes it, and the card is frozen while
 * anything is owed); the agent repays it from the card's agent wallet straight to the settlement
 * account, and reads, per page of cards, what each card has committed beside what it owes.
 */
import { Effect, Option } from "effect"
import { ChainClient } from "../chain/ChainClient.js"
import { traced } from "../observability/Traced.js"
import { CardDebtRepo } from "./CardDebtRepo.js"
import { CardProgram } from "./CardProgram.js"
import { DebtEvents, type Repaid } from "./DebtEvents.js"

/** What a card has committed and owes, millionths of a dollar. */
export interface CardCommitments {
  /** Open holds of approved card payments (not expired). */
  readonly heldMicros: bigint
  /** Cleared card payments the settlement account has not debited yet. */
  readonly clearedPendingMicros: bigint
  /** Clearings that could not be debited: the agent repays them first. */
  readonly owedMicros: bigint
  /** What the token still allows the settlement account to take; 0 when the card has no allowance. */
  readonly allowanceMicros: bigint
}

const NOTHING: CardCommitments = { heldMicros: 0n, clearedPendingMicros: 0n, owedMicros: 0n, allowanceMicros: 0n }

export class CardDebts extends Effect.Service<CardDebts>()("app/CardDebts", {
  effect: Effect.gen(function* () {
    const repo = yield* CardDebtRepo
    const program = yield* CardProgram
    const events = yield* DebtEvents
    const atomicPerMicro = 10n ** BigInt(Math.max(0, (yield* ChainClient).usd1.decimals - 6))

    /** Each card's commitments at `now`, by card id, in one statement (a card not found commits nothing). */
    const commitments = traced("CardDebts.commitments")(function* (cardIds: ReadonlyArray<string>, now: number) {
      const rows = cardIds.length === 0 ? [] : yield* repo.commitments({ cardIds, now: new Date(now), atomicPerMicro })
      const byCard = new Map<string, CardCommitments>(rows.map(({ cardId, ...row }) => [cardId, row]))
      return new Map(cardIds.map((id) => [id, byCard.get(id) ?? NOTHING])) as ReadonlyMap<string, CardCommitments>
    })

    /**
     * A repayment of `amountMicros` mined in `tx`: its entry in the ledger, the card's owed amount
     * lowered (never below 0), its owed clearings covered in full marked repaid (oldest first), and
     * the holder's `money` event (`repaid`, with what is still owed: 0 thaws the card), all in one
     * transaction (the caller's, if any). Once per transaction hash: a second call for the same `tx`
     * changes nothing and answers none.
     */
    const repaidNow = traced("CardDebts.repaid")(function* (repayment: {
      readonly cardId: string
      readonly amountMicros: bigint
      readonly tx: string
      readonly at: Date
    }) {
      const recorded = yield* repo.insertRepayment(repayment)
      if (!recorded) return Option.none<Repaid>()
      const { address, owedMicros } = yield* repo.lowerOwed(repayment)
      yield* repo.markRepaid(repayment.cardId, repayment.at)
      const repaid: Repaid = {
        amountUsd: Number(repayment.amountMicros) / 1_000_000,
        tx: repayment.tx,
        owedUsd: Number(owedMicros) / 1_000_000
      }
      yield* events.repaid(address, repaid)
      yield* Effect.logInfo(owedMicros === 0n ? "card debt repaid; the card thaws" : "card debt partly repaid").pipe(
        Effect.annotateLogs({ "card.id": repayment.cardId, "tx.hash": repayment.tx })
      )
      return Option.some(repaid)
    })
    const repaid = (repayment: Parameters<typeof repaidNow>[0]) => repo.withTransaction(repaidNow(repayment))

    return {
      /** The settlement account a repayment is sent to (the card program's, where clearings are debited to). */
      settlementAccount: program.address,
      commitments,
      repaid
    }
  }),
  dependencies: [CardDebtRepo.Default]
}) {}
