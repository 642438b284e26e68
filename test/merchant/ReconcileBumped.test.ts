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
import { ChainClient } from "../../src/chain/ChainClient.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { merchantInMemory, settlingOrder } from "../support/settlements.js"

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
      // Left broadcast by a replica that died after journaling the bump.
      yield* sql`INSERT INTO merchant_replicas (id, heartbeat_at) VALUES ('dead', now() - interval '1 minute')`
      const { orderId, payload } = yield* settlingOrder({
        amount: "2",
        owner: "dead",
        status: "broadcast",
        tx: { hash: BUMP, raw: "0x02" }
      })
      const { from, value } = payload.payload.authorization
      transfer = { from: getAddress(from), value: BigInt(value) }

      yield* merchant.reconcile

      const paid = yield* merchant.getOrder(orderId)
      expect(paid.status).toBe("paid")
      expect(paid.tx).toBe(MINED)
      const [settlement] = yield* sql<{ status: string; txHash: string }>`
        SELECT status, tx_hash FROM settlements WHERE order_id = ${orderId}`
      expect(settlement).toEqual({ status: "succeeded", txHash: MINED })
    }).pipe(Effect.orDie)
  )
})
