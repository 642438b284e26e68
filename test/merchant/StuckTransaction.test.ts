/**
 * A stuck settlement (issue 18, item 3): with the devnet not mining on its own, the relayer's
 * transaction is dropped from the pool or priced out by a base-fee spike. RELAYER_STUCK_AFTER after
 * it was signed, the tracker replaces it with the same nonce and a fee raised by at least 12.5 %
 * (and to the estimate now), within MAX_FEE_PER_GAS; every version is journaled. Mining resumed,
 * the replacement is mined: one transfer on chain, the order paid once with it. On the real devnet
 * and database, the service in process.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { createPublicClient, type Hash, http, parseGwei } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { awaitBroadcast, signedOrder } from "../support/settlements.js"
import { devnetRpc, TestDevnet, usd1TransfersTo } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const MAX_FEE_PER_GAS = parseGwei("500")

interface JournalRow {
  readonly txHash: Hash
  readonly status: string
  readonly nonce: string
}

/** The journal of the order's settlement, oldest signature first. */
const journalOf = (orderId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<JournalRow>`SELECT t.tx_hash, t.status, t.nonce FROM relayed_transactions t
                             JOIN settlements s ON s.id = t.settlement_id
                             WHERE s.order_id = ${orderId} ORDER BY t.created_at`
  )

const stuckPayment = (
  describe: string,
  leaveBehind: (devnet: Parameters<typeof devnetRpc>[0], original: Hash) => Effect.Effect<unknown>
) =>
  Effect.gen(function* () {
    const devnet = yield* TestDevnet
    const client = createPublicClient({ transport: http(devnet.rpcUrl) })
    const payer = privateKeyToAccount(generatePrivateKey())
    yield* mintUsd1(devnet, payer.address, enoughFor("3")).pipe(Effect.orDie)
    const { id: orderId, header } = yield* signedOrder(payer, "3", describe)
    const sentBefore = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))

    yield* devnetRpc(devnet, "evm_setAutomine", [false])
    const paying = yield* Effect.fork(
      send("POST", `/merchant/orders/${orderId}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })
    )
    yield* awaitBroadcast(orderId)
    const [first] = yield* journalOf(orderId)
    // Journaled before it is broadcast: the node may not hold it yet.
    const original = yield* eventually(
      "the node to hold the first version",
      Effect.promise(() => client.getTransaction({ hash: first!.txHash }).catch(() => undefined)),
      (tx) => tx !== undefined
    ).pipe(Effect.map((tx) => tx!))
    yield* leaveBehind(devnet, first!.txHash)

    // Replaced with the same nonce and a higher fee, the first version kept in the journal.
    const journal = yield* eventually(
      "the stuck transaction to be replaced",
      journalOf(orderId),
      (rows) => rows.length >= 2
    )
    expect(journal[0]).toMatchObject({ txHash: first!.txHash, status: "bumped" })
    expect(new Set(journal.map((row) => row.nonce))).toEqual(new Set([first!.nonce]))
    expect(journal.filter((row) => row.status === "pending")).toHaveLength(1)

    yield* devnetRpc(devnet, "evm_setAutomine", [true])
    yield* devnetRpc(devnet, "evm_mine")
    const answer = yield* Fiber.join(paying)
    expect([200, 202]).toContain(answer.status)
    const order = yield* eventually(
      "the order to be paid",
      send("GET", `/merchant/orders/${orderId}`),
      (response) => response.body.status === "paid"
    )

    // Exactly one transfer: a replacement, with the same nonce and a fee at least 12.5 % higher.
    const transfers = yield* usd1TransfersTo(devnet, merchant.address)
    const ours = transfers.filter((log) => log.args.from === payer.address)
    expect(ours.map((log) => log.transactionHash)).toEqual([order.body.tx])
    expect(order.body.tx).not.toBe(first!.txHash)
    const mined = yield* Effect.promise(() => client.getTransaction({ hash: order.body.tx as Hash }))
    expect(mined.nonce).toBe(original.nonce)
    expect(mined.maxFeePerGas! * 1000n >= original.maxFeePerGas! * 1125n).toBe(true)
    expect(mined.maxPriorityFeePerGas! * 1000n >= original.maxPriorityFeePerGas! * 1125n).toBe(true)
    expect(mined.maxFeePerGas! <= MAX_FEE_PER_GAS).toBe(true)
    expect(yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))).toBe(sentBefore + 1)
    const settlements = yield* Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql`SELECT status, tx_hash FROM settlements WHERE order_id = ${orderId}`
    )
    expect(settlements).toEqual([{ status: "succeeded", txHash: order.body.tx }])
    const live = yield* eventually("the journal to follow the mined version", journalOf(orderId), (rows) =>
      rows.some((row) => row.txHash === order.body.tx && (row.status === "mined" || row.status === "final"))
    )
    expect(live.filter((row) => row.status === "mined" || row.status === "final")).toHaveLength(1)
    return mined
  }).pipe(
    // a failure above must not leave the next test a devnet that mines nothing
    Effect.ensuring(Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "evm_setAutomine", [true])))
  )

layer(
  testServer({
    MERCHANT_PAY_TO: merchant.address,
    RELAYER_STUCK_AFTER: "1 second",
    RECONCILE_INTERVAL: "200 millis",
    MAX_FEE_PER_GAS: "500"
  }),
  { excludeTestServices: true }
)("a stuck settlement transaction", (it) => {
  it.effect(
    "dropped from the pool: replaced with the same nonce and a bumped fee, mined once, the order paid once",
    () =>
      stuckPayment("dropped", (devnet, original) => devnetRpc(devnet, "anvil_dropTransaction", [original])).pipe(
        Effect.asVoid
      ),
    120_000
  )

  it.effect(
    "priced out by a base-fee spike: replaced with at least the fee the chain asks now, within MAX_FEE_PER_GAS",
    () =>
      Effect.gen(function* () {
        const spike = parseGwei("100")
        const mined = yield* stuckPayment("priced out", (devnet) =>
          Effect.gen(function* () {
            // The next block asks far more than the transaction offers: it is mined without it.
            yield* devnetRpc(devnet, "anvil_setNextBlockBaseFeePerGas", [`0x${spike.toString(16)}`])
            yield* devnetRpc(devnet, "evm_mine")
          })
        )
        // Signed for the base fee after the spike, not just 12.5 % over a fee that no longer pays.
        expect(mined.maxFeePerGas! > spike).toBe(true)
      }),
    120_000
  )
})
