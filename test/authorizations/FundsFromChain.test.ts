/**
 * The funds an authorization sees come from the chain without a JSON-RPC call on its path: the
 * balance follower reads the card wallet after each block that moves its USD1, and an
 * authorization reads only the database. Here the chain's only endpoint is stalled while the card
 * pays: a call on the path would hang it past its budget (the stand-in); instead each decision is
 * made on the balance the last block left, and the endpoint answered nothing meanwhile.
 */
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { createWalletClient, erc20Abi, http, parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { followedAtomic, fundedCardHolder, fundFromAnvil, swipe } from "../support/cards.js"
import { send } from "../support/http.js"
import { ChainEndpoints, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const stranger = privateKeyToAccount(generatePrivateKey())

describe("available funds follow the chain", () => {
  layer(
    testServer(
      // No scheduled read of every wallet while the endpoint is held (it would be a balance read).
      { MERCHANT_PAY_TO: merchant.address, CARD_BALANCE_REFRESH: "1 hour" },
      { kycProvider: ScriptedKycProvider.layer(), chain: multiEndpointTestChain(1, "4 seconds", "1 second") }
    ),
    { excludeTestServices: true }
  )((it) => {
    it.effect("an x402 payment and an outside transfer lower them by the next block; no JSON-RPC call to decide", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("20")
        const devnet = yield* TestDevnet
        const [endpoint] = yield* ChainEndpoints

        // An x402 payment of $3 by the card's key, settled by the relayer.
        const order = (yield* send("POST", "/merchant/orders", { json: { amount: "3", description: "Tea" } })).body
        const offer = yield* send("GET", `/merchant/orders/${order.id}/pay`)
        const { header } = yield* Effect.promise(() => signPayment(holder.account, offer.body as Offer))
        // The order's amount: $3 and its own value below a micro-dollar (docs/security.md).
        const paidAtomic = BigInt((offer.body as Offer).accepts[0]!.amount)
        const paid = yield* send("POST", `/merchant/orders/${order.id}/pay`, {
          headers: { "PAYMENT-SIGNATURE": header }
        })
        expect(paid.status).toBe(200)
        const afterPayment = parseUnits("20", 18) - paidAtomic
        yield* eventually(
          "the payment followed",
          followedAtomic(holder.account.address),
          (usd1) => usd1 === afterPayment
        )

        // $5 sent out of the card wallet outside the service.
        yield* fundFromAnvil(devnet, holder.account.address)
        yield* Effect.promise(() =>
          createWalletClient({ account: holder.account, transport: http(devnet.rpcUrl) }).writeContract({
            address: devnet.usd1,
            abi: erc20Abi,
            functionName: "transfer",
            args: [stranger.address, parseUnits("5", 18)],
            chain: null
          })
        )
        yield* eventually(
          "the transfer followed",
          followedAtomic(holder.account.address),
          (usd1) => usd1 === afterPayment - parseUnits("5", 18)
        )

        // The endpoint holds every request while the two are decided: a decision that asked the chain
        // would wait past its budget (a stand-in). What was sent to it meanwhile is answered when it
        // lets go: the watcher's look at the head, and no read of a balance.
        const reads = () =>
          [...endpoint!.answeredByLabel()]
            .filter(([label]) => label.startsWith("eth_call") || label === "eth_getBalance")
            .reduce((sum, [, n]) => sum + n, 0)
        const readsBefore = reads()
        endpoint!.stall()
        let readsWhileDeciding = Number.NaN
        const [tooMuch, coffee] = yield* Effect.all([swipe(holder.card, "12.01"), swipe(holder.card, "4.50")], {
          concurrency: 1
        }).pipe(
          Effect.ensuring(
            Effect.sync(() => {
              endpoint!.forward()
              readsWhileDeciding = reads() - readsBefore
            })
          )
        )
        expect(readsWhileDeciding).toBe(0)
        expect(tooMuch.body).toMatchObject({ approved: false, reason: "insufficient_funds" })
        expect(coffee.body).toMatchObject({ approved: true })
        const authorizations = (yield* send("GET", "/card/authorizations", {
          headers: { authorization: `Bearer ${holder.token}` }
        })).body
        expect(authorizations[0]).toMatchObject({ approved: true })
        // $20 − $3.000000xx − $5 − $4.50, in millionths rounded down.
        expect(authorizations[0].availableUsd).toBe(Number((afterPayment - parseUnits("9.5", 18)) / 10n ** 12n) / 1e6)
      })
    )
  })
})
