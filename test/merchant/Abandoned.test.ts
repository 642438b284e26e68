/**
 * A settlement the reconciler already decided (the request stalled past
 * SETTLEMENT_RECONCILE_AFTER) must not be broadcast afterwards: recording it fails, so the
 * processor never sends the transaction. The processor is a test double standing in for the
 * relayer; the merchant logic and the database are the real ones.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Either, Layer, Option } from "effect"
import type { Hash } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { PaymentProcessor, type SettleOutcome } from "../../src/merchant/PaymentProcessor.js"
import { merchantInMemory } from "../support/settlements.js"
import { signPayment } from "../support/x402.js"

const attempts: Array<Either.Either<void, unknown>> = []

const StallingProcessor = Layer.effect(
  PaymentProcessor,
  Effect.map(SqlClient.SqlClient, (sql) => ({
    recordsBeforeBroadcast: true,
    verify: () => Effect.succeed({ _tag: "Valid", balance: Option.none() } as const),
    settle: (payload, _requirements, record) =>
      Effect.gen(function* () {
        const { from, nonce } = payload.payload.authorization
        // Meanwhile the reconciler gave the settlement up and reopened the order.
        const [row] = yield* sql<{ orderId: string }>`
          UPDATE settlements SET status = 'failed', error_reason = 'reconciled'
          WHERE lower(payer) = ${from.toLowerCase()} AND nonce = ${nonce.toLowerCase()}
          RETURNING order_id`.pipe(Effect.orDie)
        yield* sql`UPDATE orders SET status = 'open' WHERE id = ${row!.orderId}`.pipe(Effect.orDie)
        const recorded = yield* Effect.either(
          record({
            sender: "0x0000000000000000000000000000000000000001",
            hash: `0x${"11".repeat(32)}` as Hash,
            raw: "0x00",
            nonce: 0
          })
        )
        attempts.push(recorded)
        return (Either.isLeft(recorded)
          ? { _tag: "Rejected", reason: "unexpected_settle_error" }
          : { _tag: "Settled", transaction: `0x${"11".repeat(32)}` }) satisfies SettleOutcome as SettleOutcome
      })
  }))
)

const MerchantTest = merchantInMemory(StallingProcessor)

layer(MerchantTest, { excludeTestServices: true })("a settlement decided meanwhile", (it) => {
  it.effect("is not recorded as broadcast, so it is never sent, and the order stays open", () =>
    Effect.gen(function* () {
      const merchant = yield* Merchant
      const order = yield* merchant.createOrder({ amount: "2", description: "stalled" })
      const offer = yield* Effect.flip(merchant.pay(order.id, Option.none()))
      expect(offer._tag).toBe("PaymentRequired")
      const required = offer._tag === "PaymentRequired" ? offer.body : undefined
      const { header } = yield* Effect.promise(() =>
        signPayment(privateKeyToAccount(ANVIL_ACCOUNT_KEYS[3]!), required!)
      )
      const refused = yield* Effect.flip(merchant.pay(order.id, Option.some(header)))
      expect(refused._tag).toBe("PaymentRequired")
      expect(refused._tag === "PaymentRequired" && refused.code).toBe("SETTLEMENT_FAILED")
      expect(attempts).toHaveLength(1)
      expect(Either.isLeft(attempts[0]!)).toBe(true)

      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ status: string; txHash: string | null }>`
        SELECT status, tx_hash FROM settlements WHERE order_id = ${order.id}`
      expect(rows).toEqual([{ status: "failed", txHash: null }])
      expect((yield* merchant.getOrder(order.id)).status).toBe("open")
    })
  )
})
