/**
 * A fee-bumped settlement decided by the reconciler is recorded with the transaction that was
 * mined. The journal names the bump (the last version signed), but an earlier fee may be the one a
 * block took; the block watcher then answers the bump's receipt with the earlier version's. The
 * order must name the mined transaction, never one the chain does not have. The merchant, its
 * relayer processor and the database are the real ones; the chain is in memory, with the two
 * reads this case turns on answered as the node answers them mid-bump.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Layer, Option } from "effect"
import { getAddress, type Hash } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { merchantInMemory } from "../support/settlements.js"
import { signPayment } from "../support/x402.js"

const PAY_TO = "0x000000000000000000000000000000000000dEaD"
/** The version the journal holds (the bump) and the one mined (its earlier fee). */
const BUMP = `0x${"22".repeat(32)}` as Hash
const MINED = `0x${"11".repeat(32)}` as Hash

/** What the payment moved, once signed: the mined version's receipt shows it. */
let transfer: { readonly from: `0x${string}`; readonly value: bigint } | undefined

/**
 * The in-memory chain, but the authorization reads as unused (read before the block) and the bump's
 * receipt is the mined earlier version's, as the block watcher answers every version of a nonce.
 */
const MidBumpChain = Layer.scopedContext(
  Effect.gen(function* () {
    const context = yield* Layer.build(InMemoryChain.layer())
    const chain = Context.get(context, ChainClient)
    return Context.add(
      context,
      ChainClient,
      ChainClient.of({
        ...chain,
        authorizationState: () => Effect.succeed(false),
        receipt: (hash, timeoutMs) =>
          hash === BUMP && transfer !== undefined
            ? Effect.succeed(
                Option.some({
                  hash: MINED,
                  status: "success" as const,
                  outOfGas: false,
                  transfers: [{ token: chain.usd1.address, from: transfer.from, to: PAY_TO, value: transfer.value }],
                  blockNumber: 7n,
                  blockHash: `0x${"33".repeat(32)}` as Hash
                })
              )
            : chain.receipt(hash, timeoutMs)
      })
    )
  })
)

const MerchantTest = merchantInMemory(RelayerProcessor, { SETTLEMENT_RECONCILE_AFTER: "6 seconds" }, MidBumpChain)

layer(MerchantTest, { excludeTestServices: true })("a bumped settlement the reconciler decides", (it) => {
  it.effect("is paid with the mined version's hash, not the bump's the journal holds", () =>
    Effect.gen(function* () {
      const merchant = yield* Merchant
      const sql = yield* SqlClient.SqlClient
      const order = yield* merchant.createOrder({ amount: "2", description: "bumped" })
      const offer = yield* Effect.flip(merchant.pay(order.id, Option.none()))
      const requirements = offer._tag === "PaymentRequired" ? offer.body.accepts[0]! : undefined
      const { payload } = yield* Effect.promise(() =>
        signPayment(privateKeyToAccount(generatePrivateKey()), requirements!)
      )
      const { from, nonce, value, validBefore } = payload.payload.authorization
      transfer = { from: getAddress(from), value: BigInt(value) }
      // Left broadcast by a replica that died after journaling the bump.
      yield* sql`INSERT INTO merchant_replicas (id, heartbeat_at) VALUES ('dead', now() - interval '1 minute')`
      yield* sql`INSERT INTO settlements
                   (order_id, payer, nonce, amount_atomic, valid_before, payload, status, owner, tx_hash, raw_tx,
                    created_at, updated_at)
                 VALUES (${order.id}, ${from}, ${nonce}, ${value}, ${validBefore}, ${JSON.stringify(payload)}::jsonb,
                         'broadcast', 'dead', ${BUMP}, '0x02', now(), now())`
      yield* sql`UPDATE orders SET status = 'settling' WHERE id = ${order.id}`

      yield* merchant.reconcile

      const paid = yield* merchant.getOrder(order.id)
      expect(paid.status).toBe("paid")
      expect(paid.tx).toBe(MINED)
      const [settlement] = yield* sql<{ status: string; txHash: string }>`
        SELECT status, tx_hash FROM settlements WHERE order_id = ${order.id}`
      expect(settlement).toEqual({ status: "succeeded", txHash: MINED })
    }).pipe(Effect.orDie)
  )
})
