/**
 * The card network's endpoint as the network calls it: every message signed, each answered once,
 * a transaction's life after its authorization, and the stand-in when the database stalls.
 */
import { randomUUID } from "node:crypto"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { transactionUpdatedBody } from "../../src/authorizations/LithicWire.js"
import { secretKey, sign } from "../../src/authorizations/StandardWebhooks.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import {
  asaRequest,
  COFFEE,
  cardToken,
  fundedCardHolder,
  NETWORK_SECRET,
  postNetworkMessage,
  storedAuthorizations,
  swipe
} from "../support/cards.js"
import { bearer, send } from "../support/http.js"
import { DatabaseProxy, ProxiedTestDatabase } from "../support/TestDatabase.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const env = { CARD_SANDBOX_SECRET: NETWORK_SECRET }
const merchant = { name: COFFEE.name, mcc: COFFEE.mcc, city: COFFEE.city, country: COFFEE.country }

describe("the card network's endpoint", () => {
  layer(testServer(env, { kycProvider: ScriptedKycProvider.layer() }), { excludeTestServices: true })((it) => {
    it.effect("the same authorization sent 5 times at once: one hold, the same answer each time", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("10")
        const body = asaRequest(yield* cardToken(holder.account.address), 600)
        const messageId = `msg_${randomUUID()}`
        const answers = yield* Effect.all(
          Array.from({ length: 5 }, () => postNetworkMessage(body, { messageId })),
          { concurrency: 5 }
        )
        expect(answers.map((answer) => answer.status)).toEqual([200, 200, 200, 200, 200])
        for (const answer of answers) expect(answer.body).toMatchObject({ token: body.token, result: "APPROVED" })
        expect(new Set(answers.map((answer) => JSON.stringify(answer.body.result))).size).toBe(1)
        const stored = yield* storedAuthorizations(holder.account.address)
        expect(stored).toEqual([expect.objectContaining({ id: body.token, approved: true, heldMicros: "6000000" })])
        // Another message on the same authorization is an increment: $6 more does not fit in $4.
        const more = yield* postNetworkMessage(asaRequest(yield* cardToken(holder.account.address), 600, body.token))
        expect(more.body).toMatchObject({ token: body.token, result: "INSUFFICIENT_FUNDS" })
        expect((yield* storedAuthorizations(holder.account.address))[0]!.heldMicros).toBe("6000000")
      })
    )

    it.effect("a missing, forged or replayed signature gets 401 and stores nothing", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("10")
        const body = asaRequest(yield* cardToken(holder.account.address), 100)
        const text = JSON.stringify(body)
        const forged = sign(
          secretKey("whsec_Zm9yZ2VkLXNlY3JldC1vZi1hbi1hdHRhY2tlcg==")!,
          "msg_forged",
          text,
          Date.now()
        )
        const replayed = sign(secretKey(NETWORK_SECRET)!, "msg_replayed", text, Date.now() - 6 * 60 * 1000)
        const tampered = { ...sign(secretKey(NETWORK_SECRET)!, "msg_tampered", text, Date.now()) }
        for (const headers of [{}, forged, replayed]) {
          const answer = yield* postNetworkMessage(body, { headers })
          expect(answer.status).toBe(401)
          expect(answer.body.code).toBe("NETWORK_SIGNATURE_INVALID")
        }
        // A signature over other bytes: the amount changed after signing.
        const changed = yield* send("POST", "/card-network/messages", {
          text: text.replace('"amount":100', '"amount":1'),
          headers: tampered
        })
        expect(changed.status).toBe(401)
        expect(yield* storedAuthorizations(holder.account.address)).toEqual([])
      })
    )

    it.effect("increment, partial reversal, a clearing for another amount, a refund, an expiry and a force post", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("50")
        const lifecycle = (id: string, step: string, json: unknown = {}) =>
          send("POST", `/sandbox/card-network/authorizations/${id}/${step}`, { json }).pipe(
            Effect.tap((answer) => expect(answer.status, JSON.stringify(answer.body)).toBe(200)),
            Effect.map((answer) => answer.body)
          )
        const dinner = (yield* swipe(holder.card, "20.00")).body
        expect(dinner.approved).toBe(true)
        expect(yield* lifecycle(dinner.id, "increment", { amountUsd: "5.00" })).toMatchObject({ approved: true })
        expect(yield* lifecycle(dinner.id, "increment", { amountUsd: "40.00" })).toMatchObject({
          approved: false,
          reason: "insufficient_funds"
        })
        expect(yield* lifecycle(dinner.id, "reverse", { amountUsd: "3.00" })).toMatchObject({
          amountUsd: 22,
          heldUsd: 22,
          status: "pending"
        })
        // The tip: more is cleared than was held.
        expect(yield* lifecycle(dinner.id, "clear", { amountUsd: "26.40" })).toMatchObject({
          heldUsd: 0,
          clearedUsd: 26.4,
          status: "pending"
        })
        expect(yield* lifecycle(dinner.id, "refund", { amountUsd: "2.00" })).toMatchObject({ id: dinner.id })

        const fuel = (yield* swipe(holder.card, "10.00")).body
        expect(yield* lifecycle(fuel.id, "expire")).toMatchObject({ heldUsd: 0, status: "expired" })
        const parking = (yield* swipe(holder.card, "4.00")).body
        expect(yield* lifecycle(parking.id, "reverse")).toMatchObject({ heldUsd: 0, status: "reversed" })

        // A clearing of a transaction never authorized here (a force post), sent as the network sends it.
        const forcePost = transactionUpdatedBody({
          token: randomUUID(),
          cardToken: yield* cardToken(holder.account.address),
          status: "SETTLED",
          merchant,
          events: [{ id: randomUUID(), type: "clearing", cents: 725 }],
          at: new Date()
        })
        const posted = yield* postNetworkMessage(forcePost)
        expect(posted.body).toEqual({ received: true })
        // Sent again, it is not counted twice.
        expect((yield* postNetworkMessage(forcePost)).status).toBe(200)

        const statement = (yield* send("GET", "/me/activity", { headers: bearer(holder.token) })).body
        const shown = statement.map((item: { type: string; usd: number; status: string }) => [
          item.type,
          item.usd,
          item.status
        ])
        expect(shown).toEqual([
          ["card_payment", 7.25, "pending"],
          ["card_payment", 4, "reversed"],
          ["card_payment", 10, "expired"],
          ["card_refund", 2, "pending"],
          ["card_payment", 26.4, "pending"]
        ])
        // Available: $50 − $26.40 cleared − $7.25 force-posted; nothing held.
        const next = yield* swipe(holder.card, "16.36")
        expect(next.body).toMatchObject({ approved: false, reason: "insufficient_funds" })
        expect((yield* swipe(holder.card, "16.35")).body).toMatchObject({ approved: true })
      })
    )
  })

  layer(testServer(env, { kycProvider: ScriptedKycProvider.layer() }, ProxiedTestDatabase), {
    excludeTestServices: true
  })((it) => {
    it.effect("with the database stalled: the stand-in answer, recorded once the database is back, and no hold", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("10")
        const body = asaRequest(yield* cardToken(holder.account.address), 300)
        const proxy = yield* DatabaseProxy
        proxy.setMode("stall")
        const answer = yield* postNetworkMessage(body).pipe(
          Effect.ensuring(Effect.sync(() => proxy.setMode("forward")))
        )
        expect(answer.status).toBe(200)
        expect(answer.body).toEqual({ token: body.token, result: "INSUFFICIENT_FUNDS" })
        const [stored] = yield* eventually(
          "the stand-in recorded",
          storedAuthorizations(holder.account.address),
          (rows) => rows.length === 1
        )
        expect(stored).toMatchObject({ id: body.token, approved: false, reason: "stand_in", heldMicros: "0" })
        const list = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
        expect(list.body[0]).toMatchObject({ id: body.token, approved: false, reason: "stand_in", heldUsd: 0 })
      })
    )
  })
})
