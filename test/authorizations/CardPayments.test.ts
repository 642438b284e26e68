import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { COFFEE, fundedCardHolder, swipe } from "../support/cards.js"
import { readEvents } from "../support/events.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

const holds = (cardId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        held: string
      }>`SELECT coalesce(sum(held_micros), 0)::text AS held FROM card_authorizations WHERE card_id = ${cardId}`
  ).pipe(
    Effect.map((rows) => Number(rows[0]!.held) / 1e6),
    Effect.orDie
  )

describe("card payments through the sandbox network (devnet)", () => {
  layer(testServer({}, { kycProvider: ScriptedKycProvider.layer() }), { excludeTestServices: true })((it) => {
    it.scoped("a swipe with enough USD1 is approved: a pending card payment and an authorization event", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("20")
        const events = yield* readEvents({ token: holder.token })
        yield* events.await("ready", (event) => event.event === "ready")

        const approved = yield* swipe(holder.card, "4.50")
        expect(approved.body).toMatchObject({ approved: true })
        expect(approved.body.reason).toBeUndefined()
        expect(yield* holds(holder.cardId)).toBe(4.5)

        const event = yield* events.await("authorization", (event) => event.event === "authorization")
        expect(event.data).toMatchObject({
          id: approved.body.id,
          approved: true,
          amountUsd: 4.5,
          status: "pending",
          availableUsd: 15.5,
          merchant: { name: COFFEE.name, categoryCode: COFFEE.mcc, city: COFFEE.city, country: COFFEE.country }
        })

        const statement = yield* send("GET", "/me/activity", { headers: bearer(holder.token) })
        expect(statement.status).toBe(200)
        expect(statement.body[0]).toMatchObject({
          type: "card_payment",
          usd: 4.5,
          status: "pending",
          description: COFFEE.name,
          merchant: { name: COFFEE.name, categoryCode: COFFEE.mcc }
        })
        expect(statement.body[0].tx).toBeUndefined()

        const list = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
        expect(list.body).toHaveLength(1)
        expect(list.body[0]).toMatchObject({ id: approved.body.id, approved: true, heldUsd: 4.5 })
      })
    )

    it.effect("the network declines a wrong CVV without asking the issuer", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("20")
        const wrong = String((Number(holder.card.cvv) + 1) % 1000).padStart(3, "0")
        const declined = yield* swipe({ ...holder.card, cvv: wrong }, "1.00")
        expect(declined.body).toMatchObject({ approved: false, reason: "card_verification_failed" })
        const list = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
        expect(list.body).toEqual([])
      })
    )

    it.effect("the holder's controls decline: frozen, over the daily limit, a blocked category", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("100")
        const controls = (json: unknown) =>
          send("PUT", "/card/controls", { headers: bearer(holder.token), json }).pipe(
            Effect.tap((response) => expect(response.status, JSON.stringify(response.body)).toBe(200))
          )

        expect((yield* controls({ frozen: true })).body).toMatchObject({
          frozen: true,
          frozenReason: "holder",
          dailyUsd: null
        })
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: false, reason: "card_frozen" })

        yield* controls({ frozen: false, dailyUsd: 10 })
        expect((yield* swipe(holder.card, "6.00")).body).toMatchObject({ approved: true })
        expect((yield* swipe(holder.card, "5.00")).body).toMatchObject({ approved: false, reason: "limit_exceeded" })
        expect((yield* swipe(holder.card, "4.00")).body).toMatchObject({ approved: true })

        yield* controls({ dailyUsd: null, blockedMcc: ["7995"] })
        const casino = { name: "Lucky Casino", mcc: "7995", country: "USA" }
        expect((yield* swipe(holder.card, "1.00", casino)).body).toMatchObject({
          approved: false,
          reason: "merchant_category_blocked"
        })
        const read = yield* send("GET", "/card/controls", { headers: bearer(holder.token) })
        expect(read.body).toEqual({
          frozen: false,
          frozenReason: null,
          owedUsd: 0,
          perTransactionUsd: null,
          dailyUsd: null,
          monthlyUsd: null,
          blockedMcc: ["7995"]
        })
        const list = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
        expect(list.body.map((item: { reason?: string }) => item.reason ?? "approved")).toEqual([
          "merchant_category_blocked",
          "approved",
          "limit_exceeded",
          "approved",
          "card_frozen"
        ])
      })
    )

    it.effect("a replaced card's old number declines card_canceled; the new one pays", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("20")
        const replaced = yield* send("POST", "/card/replace", { headers: bearer(holder.token) })
        expect(replaced.status).toBe(200)
        expect(replaced.body.number).not.toBe(holder.card.number)
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: false, reason: "card_canceled" })
        expect((yield* swipe(replaced.body, "1.00")).body).toMatchObject({ approved: true })
        const me = yield* send("GET", "/me", { headers: bearer(holder.token) })
        expect(me.body.card.number).toBe(replaced.body.number)
      })
    )
  })
})
