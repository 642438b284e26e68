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
import type { PaymentRequirements } from "../../src/merchant/X402.js"
import { followedUsd1, fundedCardHolder, fundFromAnvil, swipe } from "../support/cards.js"
import { send } from "../support/http.js"
import { ChainEndpoints, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const stranger = privateKeyToAccount(generatePrivateKey())

describe("available funds follow the chain", () => {
  layer(
    testServer(
      { MERCHANT_PAY_TO: merchant.address },
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
        const { header } = yield* Effect.promise(() =>
          signPayment(holder.account, offer.body.accepts[0] as PaymentRequirements, { resource: offer.body.resource })
        )
        const paid = yield* send("POST", `/merchant/orders/${order.id}/pay`, {
          headers: { "PAYMENT-SIGNATURE": header }
        })
        expect(paid.status).toBe(200)
        yield* eventually("the payment followed", followedUsd1(holder.account.address), (usd1) => usd1 === 17)

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
        yield* eventually("the transfer followed", followedUsd1(holder.account.address), (usd1) => usd1 === 12)

        const answeredBefore = endpoint!.answered()
        endpoint!.stall()
        const [tooMuch, coffee] = yield* Effect.all([swipe(holder.card, "12.01"), swipe(holder.card, "4.50")], {
          concurrency: 1
        }).pipe(Effect.ensuring(Effect.sync(() => endpoint!.forward())))
        expect(tooMuch.body).toMatchObject({ approved: false, reason: "insufficient_funds" })
        expect(coffee.body).toMatchObject({ approved: true })
        const authorizations = (yield* send("GET", "/card/authorizations", {
          headers: { authorization: `Bearer ${holder.token}` }
        })).body
        expect(authorizations[0]).toMatchObject({ approved: true, availableUsd: 7.5 })
        expect(endpoint!.answered()).toBe(answeredBefore)
      })
    )
  })
})
