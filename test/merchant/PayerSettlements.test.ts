/**
 * What a payment reads of its payer's settlements of the asset (`OrderRepo.loadOrderForPayer`
 * before the check, `OrderRepo.reserve` at the reservation): the newest one's id, the unsettled
 * ones, and their amount counted against the payer's balance. Another payer's settlements and
 * another asset's do not count; a settled one stops counting against the balance. The database is
 * the real one; the chain is in memory.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { OrderRepo } from "../../src/merchant/OrderRepo.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import type { PaymentPayload } from "../../src/merchant/X402.js"
import { merchantInMemory } from "../support/settlements.js"

const USD1 = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
const OTHER_ASSET = "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512"
const newPayer = () => privateKeyToAccount(generatePrivateKey()).address

layer(merchantInMemory(RelayerProcessor), { excludeTestServices: true })("a payer's settlements", (it) => {
  let orders = 0
  const order = (amountMicros: bigint) =>
    Effect.gen(function* () {
      const id = `payer-settlements-${orders++}-${Date.now()}`
      const now = new Date()
      yield* (yield* OrderRepo).insertOrder({
        id,
        amount: String(Number(amountMicros) / 1_000_000),
        amountMicros,
        description: "an order",
        status: "open",
        createdAt: now,
        expiresAt: new Date(now.getTime() + 600_000)
      })
      return id
    })
  /** `payer`'s payment of `amount` (atomic) in `asset`, reserved against `balance`. */
  const reserve = (payer: string, asset: string, amount: bigint, balance: bigint) =>
    Effect.gen(function* () {
      const orderId = yield* order(amount)
      const nonce = generatePrivateKey()
      const payload: PaymentPayload = {
        x402Version: 2,
        accepted: {
          scheme: "exact",
          network: "eip155:31337",
          amount: amount.toString(),
          asset,
          payTo: "0x000000000000000000000000000000000000dEaD",
          maxTimeoutSeconds: 300,
          extra: {}
        },
        payload: {
          signature: "0x00",
          authorization: {
            from: payer,
            to: "0x000000000000000000000000000000000000dEaD",
            value: amount.toString(),
            validAfter: "0",
            validBefore: "9999999999",
            nonce
          }
        }
      }
      return yield* (yield* OrderRepo).reserve({
        orderId,
        payer,
        asset,
        balance,
        nonce,
        amountAtomic: amount,
        validBefore: 9_999_999_999n,
        payload,
        owner: "me",
        now: new Date()
      })
    })
  const before = (payer: string) =>
    Effect.gen(function* () {
      const id = yield* order(1n)
      const loaded = yield* (yield* OrderRepo).loadOrderForPayer({ id, now: new Date(), payer, asset: USD1 })
      return Option.map(loaded, ({ newest, unsettled }) => ({ newest, unsettled }))
    })
  const idOf = (reserved: { readonly _tag: string; readonly settlementId?: number }) => {
    if (reserved._tag !== "Reserved") throw new Error(`not reserved: ${reserved._tag}`)
    return reserved.settlementId!
  }

  it.effect("the unsettled ones count against the balance; the newest id tells that one was added", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      const payer = newPayer()
      expect(yield* before(payer)).toEqual(Option.some({ newest: 0, unsettled: 0 }))

      const first = yield* reserve(payer, USD1, 2n, 3n)
      expect(first).toEqual({ _tag: "Reserved", settlementId: idOf(first), others: { newest: 0, unsettled: 0 } })
      // 3 - 2 unsettled leaves 1: a second payment of 2 is refused, nothing reserved
      expect(yield* reserve(payer, USD1, 2n, 3n)).toEqual({ _tag: "Overdrawn" })
      // another payer's and another asset's settlements do not count
      idOf(yield* reserve(newPayer(), USD1, 2n, 2n))
      idOf(yield* reserve(payer, OTHER_ASSET, 5n, 5n))
      expect(yield* before(payer)).toEqual(Option.some({ newest: idOf(first), unsettled: 1 }))

      const second = yield* reserve(payer, USD1, 1n, 3n)
      expect(second).toMatchObject({ _tag: "Reserved", others: { newest: idOf(first), unsettled: 1 } })
      expect(yield* before(payer)).toEqual(Option.some({ newest: idOf(second), unsettled: 2 }))

      // settled: no longer counted against the balance, still the newest
      yield* sql`UPDATE settlements SET status = 'succeeded' WHERE id IN (${idOf(first)}, ${idOf(second)})`
      expect(yield* before(payer)).toEqual(Option.some({ newest: idOf(second), unsettled: 0 }))
      const third = yield* reserve(payer, USD1, 3n, 3n)
      expect(third).toMatchObject({ _tag: "Reserved", others: { newest: idOf(second), unsettled: 0 } })
    })
  )
})
