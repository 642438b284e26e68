/**
 * A relayed settlement that runs out of gas moved nothing and left its authorization unused: the
 * relayer sends it again (recorded again, the gas estimated anew) within the same payment, which is
 * paid once. The chain is in memory, with the first relayed transaction mined out of gas; the
 * merchant, its relayer processor and the database are the real ones.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer, Option } from "effect"
import type { Hash } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ChainClient, type ChainClientShape, type SignedTransaction } from "../../src/chain/ChainClient.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Events } from "../../src/events/Events.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { signPayment } from "../support/x402.js"

const MERCHANT = "0x000000000000000000000000000000000000dEaD"
const starved: SignedTransaction = {
  sender: "0x0000000000000000000000000000000000000001",
  hash: `0x${"5a".repeat(32)}` as Hash,
  raw: "0x5a",
  nonce: 0
}

/** The in-memory chain, whose first relayed transaction is recorded, "sent" and mined out of gas. */
const FirstRelayStarved = Layer.scopedContext(
  Effect.gen(function* () {
    const inner = yield* Layer.build(InMemoryChain.layer())
    const client = Context.get(inner, ChainClient)
    let relayed = 0
    const chain: ChainClientShape = {
      ...client,
      transferWithAuthorization: (authorization, signature, record) =>
        relayed++ === 0
          ? Effect.as(record(starved), starved)
          : client.transferWithAuthorization(authorization, signature, record),
      receipt: (hash, timeoutMs) =>
        hash === starved.hash
          ? Effect.succeed(
              Option.some({
                hash,
                status: "reverted" as const,
                outOfGas: true,
                transfers: [],
                blockNumber: 1n,
                blockHash: hash
              })
            )
          : client.receipt(hash, timeoutMs)
    }
    return Context.add(inner, ChainClient, chain)
  })
)

const MerchantTest = Merchant.Default.pipe(
  Layer.provide([RelayerProcessor, Events.Default]),
  Layer.provideMerge(FirstRelayStarved),
  Layer.provideMerge(TestDatabase),
  Layer.provide(AppConfig.layer),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["MERCHANT_PAY_TO", MERCHANT]]))))
)

layer(MerchantTest, { excludeTestServices: true })("a settlement out of gas", (it) => {
  it.effect("is sent again with fresh gas and pays the order once", () =>
    Effect.gen(function* () {
      const merchant = yield* Merchant
      const chain = yield* InMemoryChain
      const payer = privateKeyToAccount(generatePrivateKey())
      yield* chain.mint(chain.usd1.address, payer.address, 10n ** 19n)
      const order = yield* merchant.createOrder({ amount: "2", description: "starved" })
      const offer = yield* Effect.flip(merchant.pay(order.id, Option.none()))
      const required = offer._tag === "PaymentRequired" ? offer.body : undefined
      const { header } = yield* Effect.promise(() => signPayment(payer, required!))

      const paid = yield* merchant.pay(order.id, Option.some(header))
      const receipt = Option.getOrThrow(paid.receipt)
      expect(paid.order.status).toBe("paid")
      expect(receipt.transaction).not.toBe(starved.hash)
      const transfers = (yield* chain.transfers).filter((transfer) => transfer.to === MERCHANT)
      expect(transfers.map((transfer) => [transfer.hash, transfer.value])).toEqual([
        [receipt.transaction, BigInt(required!.accepts[0]!.amount)]
      ])
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ status: string; txHash: string }>`
        SELECT status, tx_hash FROM settlements WHERE order_id = ${order.id}`
      expect(rows).toEqual([{ status: "succeeded", txHash: receipt.transaction }])
    })
  )
})
