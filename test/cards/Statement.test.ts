import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { signIn } from "../support/auth.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[0]!)

/** Creates an order and pays it from `payer` over x402; answers the paid order. */
const payOrder = (payer: ReturnType<typeof privateKeyToAccount>, amount: string, description: string) =>
  Effect.gen(function* () {
    const order = (yield* send("POST", "/merchant/orders", { json: { amount, description } })).body
    const offer: Offer = (yield* send("GET", `/merchant/orders/${order.id}/pay`)).body
    const { header } = yield* Effect.promise(() => signPayment(payer, offer))
    const paid = yield* send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "payment-signature": header } })
    expect(paid.status).toBe(200)
    return paid.body
  })

layer(testServer({ MERCHANT_PAY_TO: merchant.address }), { excludeTestServices: true })("card statement", (it) => {
  it.effect("paid orders appear newest first, with cursor pagination, only for their payer", () =>
    Effect.gen(function* () {
      const card = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[6]!)
      const { token } = yield* signIn(card)
      expect((yield* send("GET", "/me/activity", { headers: bearer(token) })).body).toEqual([])

      // Signed with the address in lower case: still the card's payment.
      const first = yield* payOrder(
        { ...card, address: card.address.toLowerCase() as `0x${string}` },
        "3.5",
        "Croissant"
      )
      const second = yield* payOrder(card, "12", "Lunch")
      const third = yield* payOrder(card, "0.99", "Gum")
      // Another payer's order never shows.
      yield* payOrder(privateKeyToAccount(ANVIL_ACCOUNT_KEYS[7]!), "50", "Someone else")
      // An unpaid order never shows.
      yield* send("POST", "/merchant/orders", { json: { amount: "1", description: "unpaid" } })

      const all = yield* send("GET", "/me/activity", { headers: bearer(token) })
      expect(all.status).toBe(200)
      expect(all.body).toEqual([
        { id: third.id, type: "payment", at: expect.any(Number), usd: 0.99, description: "Gum", tx: third.tx },
        { id: second.id, type: "payment", at: expect.any(Number), usd: 12, description: "Lunch", tx: second.tx },
        { id: first.id, type: "payment", at: expect.any(Number), usd: 3.5, description: "Croissant", tx: first.tx }
      ])
      const times = all.body.map((item: { at: number }) => item.at)
      expect([...times].sort((a, b) => b - a)).toEqual(times)

      const page1 = yield* send("GET", "/me/activity?limit=2", { headers: bearer(token) })
      expect(page1.body.map((item: { id: string }) => item.id)).toEqual([third.id, second.id])
      const page2 = yield* send("GET", `/me/activity?limit=2&before=${second.id}`, { headers: bearer(token) })
      expect(page2.body.map((item: { id: string }) => item.id)).toEqual([first.id])
      const foreign = yield* send("GET", "/me/activity?before=unknown-cursor", { headers: bearer(token) })
      expect(foreign.body).toEqual([])
    })
  )

  it.effect("bad paging parameters are 400 and the statement needs a token", () =>
    Effect.gen(function* () {
      const { token } = yield* signIn()
      // One clause, naming the parameter and what it must be.
      const bounds = "limit: must be an integer from 1 to 200"
      for (const [query, message] of [
        ["limit=0", bounds],
        ["limit=201", bounds],
        ["limit=abc", bounds],
        ["limit=2.5", bounds],
        ["limit=", bounds],
        ["before=%20", "before: must be an item id"]
      ] as const) {
        const response = yield* send("GET", `/me/activity?${query}`, { headers: bearer(token) })
        expect(response.status, query).toBe(400)
        expect(response.body, query).toEqual({ error: message, code: "BAD_REQUEST" })
      }
      const anonymous = yield* send("GET", "/me/activity")
      expect(anonymous.status).toBe(401)
      expect(anonymous.body.code).toBe("UNAUTHORIZED")
    })
  )
})
