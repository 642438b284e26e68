import { SqlClient } from "@effect/sql"
import { ConfigProvider, Effect, Layer } from "effect"
import type { ChainClient } from "../../src/chain/ChainClient.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Events } from "../../src/events/Events.js"
import { Merchant } from "../../src/merchant/Merchant.js"
import { OrderRepo } from "../../src/merchant/OrderRepo.js"
import type { PaymentProcessor } from "../../src/merchant/PaymentProcessor.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { TestDatabase } from "./TestDatabase.js"
import { eventually } from "./wait.js"

/**
 * The merchant (and its repository) with `processor`, on the test database and an in-memory
 * chain, paid to a fixed address; `settings` are further merchant settings.
 */
export const merchantInMemory = <E>(
  processor: Layer.Layer<PaymentProcessor, E, SqlClient.SqlClient | ChainClient | InMemoryChain>,
  settings: Record<string, string> = {}
) =>
  Layer.merge(Merchant.Default, OrderRepo.Default).pipe(
    Layer.provide([processor, Events.Default]),
    Layer.provideMerge(TestDatabase),
    Layer.provide(InMemoryChain.layer()),
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
