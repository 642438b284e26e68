/**
 * Reading an order (`OrderRepo.loadOrder`): a plain read of an order not due, and the expiry applied
 * by the read that finds an open order past its expiry (told apart from an order expired before).
 * The database is the real one; the chain is in memory.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { OrderRepo } from "../../src/merchant/OrderRepo.js"
import { RelayerProcessor } from "../../src/merchant/PaymentProcessor.js"
import { merchantInMemory } from "../support/settlements.js"

layer(merchantInMemory(RelayerProcessor), { excludeTestServices: true })("loadOrder", (it) => {
  const MINUTE = 60_000
  const created = new Date("2026-11-26T00:00:00Z")
  const insert = (id: string) =>
    Effect.flatMap(OrderRepo, (repo) =>
      repo.insertOrder({
        id,
        amount: "1.5",
        amountMicros: 1_500_000n,
        description: "an order",
        status: "open",
        createdAt: created,
        expiresAt: new Date(created.getTime() + MINUTE)
      })
    )
  const stored = (id: string) =>
    Effect.flatMap(
      SqlClient.SqlClient,
      (sql) => sql<{ status: string }>`SELECT status FROM orders WHERE id = ${id}`
    ).pipe(Effect.map((rows) => rows[0]?.status))
  const load = (id: string, now: Date) =>
    Effect.flatMap(OrderRepo, (repo) => repo.loadOrder({ id, now })).pipe(
      Effect.map(Option.map(({ status, justExpired, amountMicros }) => ({ status, justExpired, amountMicros })))
    )

  it.effect("an order not due is read as it stands, unchanged", () =>
    Effect.gen(function* () {
      yield* insert("not-due")
      const before = new Date(created.getTime() + MINUTE - 1)
      expect(yield* load("not-due", before)).toEqual(
        Option.some({ status: "open", justExpired: false, amountMicros: 1_500_000n })
      )
      expect(yield* stored("not-due")).toBe("open")
      expect(yield* load("missing", before)).toEqual(Option.none())
    })
  )

  it.effect("an open order past its expiry is expired by the read that finds it, once", () =>
    Effect.gen(function* () {
      yield* insert("due")
      const at = new Date(created.getTime() + MINUTE)
      expect(yield* load("due", at)).toEqual(
        Option.some({ status: "expired", justExpired: true, amountMicros: 1_500_000n })
      )
      expect(yield* stored("due")).toBe("expired")
      expect(yield* load("due", at)).toEqual(
        Option.some({ status: "expired", justExpired: false, amountMicros: 1_500_000n })
      )
    })
  )

  it.effect("an order being paid (settling) past its expiry is not expired", () =>
    Effect.gen(function* () {
      yield* insert("settling")
      yield* Effect.flatMap(
        SqlClient.SqlClient,
        (sql) => sql`UPDATE orders SET status = 'settling' WHERE id = ${"settling"}`
      )
      const later = new Date(created.getTime() + 2 * MINUTE)
      expect(yield* load("settling", later)).toEqual(
        Option.some({ status: "settling", justExpired: false, amountMicros: 1_500_000n })
      )
      expect(yield* stored("settling")).toBe("settling")
    })
  )
})
