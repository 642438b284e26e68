/**
 * FACILITATOR_URL: verification and settlement go through an x402 facilitator's HTTP API.
 * The facilitator here is a local fake that really settles on the devnet from its own account.
 */
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { describe, expect, layer } from "@effect/vitest"
import { Context, Effect, Layer } from "effect"
import { createPublicClient, createWalletClient, erc20Abi, type Hex, http, parseSignature } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { Usd1Artifact } from "../../src/chain/contracts/artifacts.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import type { PaymentPayload, PaymentRequirements } from "../../src/merchant/X402.js"
import { send } from "../support/http.js"
import { TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { signPayment } from "../support/x402.js"

interface FacilitatorCall {
  readonly path: string
  readonly body: { x402Version: number; paymentPayload: PaymentPayload; paymentRequirements: PaymentRequirements }
}

class FakeFacilitator extends Context.Tag("test/FakeFacilitator")<
  FakeFacilitator,
  { readonly url: string; readonly calls: Array<FacilitatorCall>; refuseWith: string | undefined }
>() {}

const FACILITATOR_KEY = ANVIL_ACCOUNT_KEYS[8]!
const merchant = privateKeyToAccount(generatePrivateKey())

interface FacilitatorDevnet {
  readonly rpcUrl: string
  readonly usd1: Hex
}

/**
 * The fake facilitator listens on a port the system chooses before the service under test is
 * configured with its URL; it settles on the service's devnet, which it learns once that is built.
 */
const TestLive = Layer.unwrapScoped(
  Effect.gen(function* () {
    let devnetKnown: (devnet: FacilitatorDevnet) => void = () => undefined
    const devnetReady = new Promise<FacilitatorDevnet>((resolve) => {
      devnetKnown = resolve
    })
    const account = privateKeyToAccount(FACILITATOR_KEY)
    const state = {
      url: "",
      calls: [] as Array<FacilitatorCall>,
      refuseWith: undefined as string | undefined
    }
    const server: Server = createServer((request, response) => {
      let text = ""
      request.on("data", (chunk) => {
        text += chunk
      })
      request.on("end", async () => {
        const body = JSON.parse(text) as FacilitatorCall["body"]
        state.calls.push({ path: request.url ?? "", body })
        const authorization = body.paymentPayload.payload.authorization
        response.setHeader("content-type", "application/json")
        if (request.url === "/verify") {
          response.end(
            JSON.stringify(
              state.refuseWith === undefined
                ? { isValid: true, payer: authorization.from }
                : { isValid: false, invalidReason: state.refuseWith }
            )
          )
          return
        }
        const devnet = await devnetReady
        const wallet = createWalletClient({ account, transport: http(devnet.rpcUrl) })
        const reader = createPublicClient({ transport: http(devnet.rpcUrl) })
        const { v, r, s } = parseSignature(body.paymentPayload.payload.signature as Hex)
        const hash = await wallet.writeContract({
          chain: null,
          address: devnet.usd1,
          abi: Usd1Artifact.abi,
          functionName: "transferWithAuthorization",
          args: [
            authorization.from as Hex,
            authorization.to as Hex,
            BigInt(authorization.value),
            BigInt(authorization.validAfter),
            BigInt(authorization.validBefore),
            authorization.nonce as Hex,
            Number(v),
            r,
            s
          ]
        })
        await reader.waitForTransactionReceipt({ hash, pollingInterval: 20 })
        response.end(
          JSON.stringify({ success: true, transaction: hash, network: "eip155:31337", payer: authorization.from })
        )
      })
    })
    const port = yield* Effect.acquireRelease(
      Effect.async<number>((resume) => {
        server.listen(0, "127.0.0.1", () => resume(Effect.succeed((server.address() as AddressInfo).port)))
      }),
      () =>
        Effect.async<void>((resume) => {
          server.close(() => resume(Effect.void))
        })
    )
    state.url = `http://127.0.0.1:${port}`
    const facilitator = Layer.effect(
      FakeFacilitator,
      Effect.map(TestDevnet, (devnet) => {
        devnetKnown(devnet)
        return state
      })
    )
    return facilitator.pipe(
      Layer.provideMerge(testServer({ MERCHANT_PAY_TO: merchant.address, FACILITATOR_URL: state.url }))
    )
  })
)

describe("x402 facilitator", () => {
  layer(TestLive, { excludeTestServices: true })("FACILITATOR_URL set", (it) => {
    it.effect("verify and settle go through the facilitator; our relayer sends nothing", () =>
      Effect.gen(function* () {
        const facilitator = yield* FakeFacilitator
        const devnet = yield* TestDevnet
        const reader = createPublicClient({ transport: http(devnet.rpcUrl) })
        const relayer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
        const relayerBefore = yield* Effect.promise(() => reader.getTransactionCount({ address: relayer }))
        const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[1]!)

        const order = (yield* send("POST", "/merchant/orders", { json: { amount: "6", description: "Book" } })).body
        const offer = (yield* send("GET", `/merchant/orders/${order.id}/pay`)).body
        const { header, payload } = yield* Effect.promise(() => signPayment(payer, offer))
        const paid = yield* send("POST", `/merchant/orders/${order.id}/pay`, {
          headers: { "payment-signature": header }
        })
        expect(paid.status).toBe(200)
        expect(paid.body).toMatchObject({ status: "paid", payer: payer.address })

        expect(facilitator.calls.map((call) => call.path)).toEqual(["/verify", "/settle"])
        for (const call of facilitator.calls) {
          expect(call.body).toEqual({ x402Version: 2, paymentPayload: payload, paymentRequirements: offer.accepts[0] })
        }
        expect(yield* Effect.promise(() => reader.getTransactionCount({ address: relayer }))).toBe(relayerBefore)
        const balance = yield* Effect.promise(() =>
          reader.readContract({
            address: devnet.usd1,
            abi: erc20Abi,
            functionName: "balanceOf",
            args: [merchant.address]
          })
        )
        expect(balance).toBe(BigInt(offer.accepts[0].amount))
      })
    )

    it.effect("a payment the facilitator finds invalid is 402 with its reason and is not settled", () =>
      Effect.gen(function* () {
        const facilitator = yield* FakeFacilitator
        facilitator.calls.length = 0
        facilitator.refuseWith = "invalid_exact_evm_insufficient_balance"
        const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[2]!)
        const order = (yield* send("POST", "/merchant/orders", { json: { amount: "1", description: "Pen" } })).body
        const offer = (yield* send("GET", `/merchant/orders/${order.id}/pay`)).body
        const { header } = yield* Effect.promise(() => signPayment(payer, offer))
        const refused = yield* send("POST", `/merchant/orders/${order.id}/pay`, {
          headers: { "payment-signature": header }
        })
        expect(refused.status).toBe(402)
        expect(refused.body.error).toBe("invalid_exact_evm_insufficient_balance")
        expect(facilitator.calls.map((call) => call.path)).toEqual(["/verify"])
        expect((yield* send("GET", `/merchant/orders/${order.id}`)).body.status).toBe("open")
      })
    )
  })
})
