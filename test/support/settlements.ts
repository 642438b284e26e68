import { SqlClient } from "@effect/sql"
import { ConfigProvider, Effect, Layer, Option } from "effect"
import { createPublicClient, http, type PrivateKeyAccount, parseAbiItem } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import type { Address } from "../../src/chain/Address.js"
import type { ChainClient } from "../../src/chain/ChainClient.js"
import type { Devnet } from "../../src/chain/Devnet.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Events } from "../../src/events/Events.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { OrderRepo } from "../../src/merchant/OrderRepo.js"
import type { PaymentProcessor } from "../../src/merchant/PaymentProcessor.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { send } from "./http.js"
import { TestDatabase } from "./TestDatabase.js"
import { eventually } from "./wait.js"
import { signPayment } from "./x402.js"

/**
 * The merchant (and its repository) with `processor`, on the test database and an in-memory
 * chain (or `chain`, built on one), paid to a fixed address; `settings` are further merchant settings.
 */
export const merchantInMemory = <E>(
  processor: Layer.Layer<PaymentProcessor, E, SqlClient.SqlClient | ChainClient | InMemoryChain>,
  settings: Record<string, string> = {},
  chain: ReturnType<typeof InMemoryChain.layer> = InMemoryChain.layer()
) =>
  Layer.merge(Merchant.Default, OrderRepo.Default).pipe(
    Layer.provide([processor, Events.Default]),
    Layer.provideMerge(TestDatabase),
    Layer.provide(chain),
    Layer.provide(AppConfig.layer),
    Layer.provide(
      Layer.setConfigProvider(
        ConfigProvider.fromMap(
          new Map([["MERCHANT_PAY_TO", "0x000000000000000000000000000000000000dEaD"], ...Object.entries(settings)])
        )
      )
    )
  )

/**
 * A new order left settling as a replica leaves it mid-payment: a fresh payer's signed payment of
 * it (from the merchant's own 402 offer), reserved as a settlement row of `owner` in `status`, with
 * its transaction once one is recorded. Answers the order's and the settlement's ids and the payment.
 */
export const settlingOrder = (options: {
  readonly amount: string
  readonly owner: string
  readonly status?: "pending" | "broadcast"
  readonly tx?: { readonly hash: string; readonly raw: string }
}) =>
  Effect.gen(function* () {
    const merchant = yield* Merchant
    const sql = yield* SqlClient.SqlClient
    const order = yield* merchant.createOrder({ amount: options.amount, description: `settling, ${options.owner}` })
    const offer = yield* Effect.flip(merchant.pay(order.id, Option.none()))
    const required = offer._tag === "PaymentRequired" ? offer.body : undefined
    const { payload } = yield* Effect.promise(() => signPayment(privateKeyToAccount(generatePrivateKey()), required!))
    const { from, nonce, value, validBefore } = payload.payload.authorization
    const [row] = yield* sql<{ id: number }>`INSERT INTO settlements
        (order_id, payer, nonce, amount_atomic, valid_before, payload, status, owner, tx_hash, raw_tx,
         created_at, updated_at)
      VALUES (${order.id}, ${from}, ${nonce}, ${value}, ${validBefore}, ${JSON.stringify(payload)}::jsonb,
              ${options.status ?? "pending"}, ${options.owner}, ${options.tx?.hash ?? null}, ${options.tx?.raw ?? null},
              now(), now())
      RETURNING id`
    yield* sql`UPDATE orders SET status = 'settling' WHERE id = ${order.id}`
    return { orderId: order.id, settlementId: row!.id, payload }
  })

/**
 * A new order of `amount` USD1 on the test server, and `payer`'s signed payment of it as a standard
 * client makes it from the 402 offer: the PAYMENT-SIGNATURE header to pay with.
 */
export const signedOrder = (payer: PrivateKeyAccount, amount: string, description: string) =>
  Effect.gen(function* () {
    const created = yield* send("POST", "/merchant/orders", { json: { amount, description } })
    const offer = yield* send("GET", `/merchant/orders/${created.body.id}/pay`)
    const { header } = yield* Effect.promise(() => signPayment(payer, offer.body))
    return { id: created.body.id as string, header }
  })

/** The USD1 transfers to `to` on the devnet from block `fromBlock` on. */
export const usd1TransfersTo = (devnet: Devnet, to: Address, fromBlock: bigint) =>
  Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).getLogs({
      address: devnet.usd1,
      event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
      args: { to },
      fromBlock
    })
  )

/** Signed payments of orders sent all at once, as many clients would: the pay answers, in order. */
export const payAllAtOnce = (payments: ReadonlyArray<{ readonly id: string; readonly header: string }>) =>
  Effect.forEach(
    payments,
    (payment) =>
      send("POST", `/merchant/orders/${payment.id}/pay`, { headers: { "PAYMENT-SIGNATURE": payment.header } }),
    { concurrency: "unbounded" }
  )

/**
 * Waits until the order's settlement is recorded as broadcast: its transaction is then signed and
 * sent, and waits for a block when the devnet does not mine on its own.
 */
export const awaitBroadcast = (orderId: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    eventually(
      `the settlement of order ${orderId} to be broadcast`,
      sql`SELECT 1 FROM settlements WHERE order_id = ${orderId} AND status = 'broadcast'`,
      (rows) => rows.length === 1,
      { every: "20 millis" }
    )
  ).pipe(Effect.asVoid)
