/**
 * The journal entry written before a relayer transaction is broadcast (`OrderRepo.recordBroadcast`,
 * one statement): a settlement signed anew marks its previous transaction replaced and journals the
 * new one; a nonce another settlement's live transaction holds records nothing; a decided settlement
 * records nothing. The database is the real one; the chain is in memory.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { OrderRepo } from "../../src/merchant/OrderRepo.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { merchantInMemory, settlingOrder } from "../support/settlements.js"

const MerchantTest = merchantInMemory(RelayerProcessor)
const SENDER = privateKeyToAccount(generatePrivateKey()).address

layer(MerchantTest, { excludeTestServices: true })("recordBroadcast", (it) => {
  /** A reserved settlement (pending, nothing sent): its id. */
  const reserved = Effect.map(settlingOrder({ amount: "1", owner: "me" }), ({ settlementId }) => settlementId)

  const journal = (settlementId: number) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql<{ txHash: string; nonce: number; status: string }>`
        SELECT tx_hash, nonce::int AS nonce, status FROM relayed_transactions WHERE settlement_id = ${settlementId} ORDER BY created_at, tx_hash`
    )
  const settlement = (settlementId: number) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) =>
        sql<{
          status: string
          txHash: string | null
        }>`SELECT status, tx_hash FROM settlements WHERE id = ${settlementId}`
    ).pipe(Effect.map((rows) => rows[0]!))
  const signed = (hash: string, nonce: number) => ({ hash, raw: `0xraw${hash}`, relayed: { sender: SENDER, nonce } })

  it.effect("signed anew: the previous transaction is replaced and the new one journaled, in one go", () =>
    Effect.gen(function* () {
      const repo = yield* OrderRepo
      const id = yield* reserved
      expect(yield* repo.recordBroadcast(id, signed("0xa1", 100), new Date())).toBe("recorded")
      // the same nonce again (a refused fee), then another nonce (a stale nonce): one live row each time
      expect(yield* repo.recordBroadcast(id, signed("0xa2", 100), new Date())).toBe("recorded")
      expect(yield* repo.recordBroadcast(id, signed("0xa3", 101), new Date())).toBe("recorded")
      expect(yield* journal(id)).toEqual([
        { txHash: "0xa1", nonce: 100, status: "replaced" },
        { txHash: "0xa2", nonce: 100, status: "replaced" },
        { txHash: "0xa3", nonce: 101, status: "pending" }
      ])
      expect(yield* settlement(id)).toEqual({ status: "broadcast", txHash: "0xa3" })
      // the same signature recorded twice (a resend) changes nothing
      expect(yield* repo.recordBroadcast(id, signed("0xa3", 101), new Date())).toBe("recorded")
      expect((yield* journal(id)).map((row) => row.status)).toEqual(["replaced", "replaced", "pending"])
    })
  )

  it.effect("a nonce another settlement's live transaction holds: nothing recorded", () =>
    Effect.gen(function* () {
      const repo = yield* OrderRepo
      const holder = yield* reserved
      const other = yield* reserved
      expect(yield* repo.recordBroadcast(holder, signed("0xb1", 200), new Date())).toBe("recorded")
      expect(yield* repo.recordBroadcast(other, signed("0xb2", 200), new Date())).toBe("nonceTaken")
      expect(yield* journal(other)).toEqual([])
      expect(yield* settlement(other)).toEqual({ status: "pending", txHash: null })
      expect(yield* journal(holder)).toEqual([{ txHash: "0xb1", nonce: 200, status: "pending" }])
    })
  )

  it.effect("a decided settlement: nothing recorded", () =>
    Effect.gen(function* () {
      const repo = yield* OrderRepo
      const sql = yield* SqlClient.SqlClient
      const id = yield* reserved
      yield* sql`UPDATE settlements SET status = 'failed' WHERE id = ${id}`
      expect(yield* repo.recordBroadcast(id, signed("0xc1", 300), new Date())).toBe("decided")
      expect(yield* journal(id)).toEqual([])
      expect((yield* settlement(id)).status).toBe("failed")
    })
  )
})
