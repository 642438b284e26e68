/**
 * The settlement account's sends, from any replica (debits, refunds, permits): each batch takes the
 * account's next nonces under the lock of its `card_program_sender` row, is signed, and is recorded
 * by the caller in that same transaction; it is broadcast after the commit, so that the next batch
 * signs while this one travels. The row moves on only with the records its nonces stand for, so a
 * nonce is never given twice, whichever replica sends; a transaction recorded and not broadcast (a
 * crash) is sent again from its record by whoever follows them (`CardSettlement`).
 */
import { SqlClient } from "@effect/sql"
import { Effect, Either } from "effect"
import type { Address } from "../chain/Address.js"
import { ChainClient, type SignedTransaction, type Usd1Call, withinChainTimeout } from "../chain/ChainClient.js"
import { AppConfig } from "../runtime/Config.js"
import { repository, transactionally } from "../storage/Sql.js"
import { CardProgram } from "./CardProgram.js"

/** A call to send, with what its caller knows it by. */
export interface ProgramCall<A> {
  readonly item: A
  readonly call: Usd1Call
  readonly gas: bigint
}

export class ProgramSender extends Effect.Service<ProgramSender>()("app/ProgramSender", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const program = yield* CardProgram
    const chain = yield* ChainClient
    const bounded = withinChainTimeout((yield* AppConfig).chainTimeout)

    const nonces = repository("ProgramSender", {
      /** The account's next nonce, its row locked until the transaction ends. */
      lockNext: (sender: Address) =>
        sql`INSERT INTO card_program_sender (sender, next_nonce) VALUES (${sender}, 0) ON CONFLICT DO NOTHING`.pipe(
          Effect.zipRight(sql<{ readonly nextNonce: string }>`
            SELECT next_nonce::text FROM card_program_sender WHERE sender = ${sender} FOR UPDATE`),
          Effect.map((rows) => Number(rows[0]!.nextNonce))
        ),
      moveTo: (sender: Address, next: number) =>
        sql`UPDATE card_program_sender SET next_nonce = ${next} WHERE sender = ${sender}`.pipe(Effect.asVoid)
    })

    /**
     * Under the nonce row's lock: `pick` says what is still to send (read under the lock, so that no
     * other replica sends the same meanwhile), each call is signed at the next nonce (the row's, or
     * the chain's pending count when that is ahead: a transaction of the key that this journal does
     * not hold), and `record` stores them; after the commit each is broadcast. A broadcast's outcome
     * is reported, not failed: what was recorded is followed to the chain whatever the node said.
     */
    const sendAll = <A, E, R>(
      pick: Effect.Effect<ReadonlyArray<ProgramCall<A>>, E, R>,
      record: (
        sent: ReadonlyArray<{ readonly item: A; readonly signed: SignedTransaction }>
      ) => Effect.Effect<void, E, R>
    ) =>
      Effect.gen(function* () {
        const sent = yield* transactionally(sql)(
          Effect.gen(function* () {
            const stored = yield* nonces.lockNext(program.address)
            const calls = yield* pick
            if (calls.length === 0) return []
            const first = Math.max(stored, yield* bounded(program.nonce("pending")))
            const sent = yield* Effect.forEach(calls, ({ item, call, gas }, index) =>
              Effect.map(bounded(program.sign(call, gas, first + index)), (signed) => ({ item, signed }))
            )
            yield* record(sent)
            yield* nonces.moveTo(program.address, first + calls.length)
            return sent
          })
        )
        return yield* Effect.forEach(
          sent,
          ({ item, signed }) =>
            Effect.map(Effect.either(bounded(chain.rebroadcast(signed.raw))), (broadcast) => ({
              item,
              signed,
              broadcast
            })),
          { concurrency: "unbounded" }
        )
      }).pipe(Effect.withSpan("ProgramSender.sendAll"))

    return { sendAll, address: program.address }
  })
}) {}

/** Whether the node took the broadcast transaction (or may still: it waits for its fee). */
export const broadcastTaken = (broadcast: Either.Either<"known" | "replaced" | "underpriced", unknown>) =>
  Either.isRight(broadcast) && broadcast.right !== "replaced"
