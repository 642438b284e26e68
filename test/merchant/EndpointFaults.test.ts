/**
 * Issue 44, items 1 and 2: a provider's own errors on one of two JSON-RPC endpoints (each a proxy
 * of one anvil) while payments flow through the service. A rate limit (HTTP 429, `-32005`) or a
 * server error is the endpoint's fault, not the chain's answer: reads go to the other endpoint,
 * payments are paid, and `/ready` stays 200 naming the endpoint degraded. Endpoints are never
 * probed here (a probe interval of an hour), so endpoint 1 is the one in use: ties keep the
 * configured order.
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Metric } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { prometheusText } from "../../src/observability/Metrics.js"
import { send } from "../support/http.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import type { ProviderError, RpcProxy } from "../support/RpcProxy.js"
import { signedOrder } from "../support/settlements.js"
import { ChainEndpoints, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const PAYERS = 8
/** Payments a payer is funded for; it stops there, however quick the window's payments are. */
const PAYMENTS_PER_PAYER = 100

const rateLimited: ProviderError = {
  methods: ["eth_call"],
  httpStatus: 429,
  error: { code: -32005, message: "rate limit exceeded" },
  retryAfter: "1"
}
const failingEverything: ProviderError = { httpStatus: 200, error: { code: -32603, message: "internal error" } }

interface ReadyAnswer {
  readonly status: number
  readonly degraded: ReadonlyArray<string>
}

/**
 * Payments by `PAYERS` payers, each paying again as soon as it is answered, and `/ready` read in a
 * loop, for the `window` during which `endpoint` answers with `fault`. Every payment answers 200 or
 * 202 and its order is then paid; answers the orders and every `/ready` answer with the endpoints
 * it named degraded.
 */
const paymentsWhile = (endpoint: RpcProxy, fault: ProviderError, window: Effect.Effect<void>) =>
  Effect.gen(function* () {
    const devnet = yield* TestDevnet
    const payers = Array.from({ length: PAYERS }, () => privateKeyToAccount(generatePrivateKey()))
    for (const payer of payers) {
      yield* mintUsd1(devnet, payer.address, enoughFor(String(PAYMENTS_PER_PAYER), PAYMENTS_PER_PAYER)).pipe(
        Effect.orDie
      )
    }
    /** "200", "202", or another status with its body. */
    const statuses: Array<string> = []
    const orders: Array<string> = []
    const readies: Array<ReadyAnswer> = []
    let open = true
    const payLoop = Effect.forEach(
      payers,
      (payer) => {
        let paid = 0
        return Effect.whileLoop({
          while: () => open && paid < PAYMENTS_PER_PAYER,
          body: () =>
            Effect.gen(function* () {
              const { id, header } = yield* signedOrder(payer, "1", "endpoint fault")
              orders.push(id)
              const answer = yield* send("POST", `/merchant/orders/${id}/pay`, {
                headers: { "PAYMENT-SIGNATURE": header }
              })
              paid += 1
              statuses.push(
                answer.status === 200 || answer.status === 202
                  ? String(answer.status)
                  : `${answer.status} ${JSON.stringify(answer.body)}`
              )
            }),
          step: () => {}
        })
      },
      { concurrency: "unbounded", discard: true }
    )
    const readyLoop = Effect.whileLoop({
      while: () => open,
      body: () =>
        send("GET", "/ready").pipe(
          Effect.map((answer) => ({
            status: answer.status,
            degraded: ((answer.body?.chainEndpoints ?? []) as ReadonlyArray<{ endpoint: number; degraded?: string }>)
              .filter((state) => state.degraded !== undefined)
              .map((state) => `${state.endpoint} ${state.degraded}`)
          }))
        ),
      step: (answer) => {
        readies.push(answer)
      }
    })
    endpoint.answerWithError(fault)
    const running = yield* Effect.fork(Effect.all([payLoop, readyLoop], { concurrency: 2, discard: true }))
    yield* window.pipe(
      Effect.ensuring(
        Effect.sync(() => {
          endpoint.answerWithError(undefined)
          open = false
        })
      )
    )
    yield* Fiber.join(running)
    expect(statuses.filter((status) => status !== "200" && status !== "202")).toEqual([])
    for (const id of orders) {
      yield* eventually(
        `order ${id} to be paid`,
        send("GET", `/merchant/orders/${id}`).pipe(Effect.map((response) => response.body.status)),
        (status) => status === "paid"
      )
    }
    return { orders, readies }
  })

layer(testServer({ MERCHANT_PAY_TO: merchant.address }, { chain: multiEndpointTestChain(2, "4 seconds", "1 hour") }), {
  excludeTestServices: true,
  timeout: "120 seconds"
})("a provider's own errors on one of two endpoints", (it) => {
  it.effect(
    "endpoint 1 answering eth_call with HTTP 429 / -32005 for 10 s: every payment paid, reads on endpoint 2, /ready 200 naming endpoint 1 degraded",
    () =>
      Effect.gen(function* () {
        const [first, second] = yield* ChainEndpoints
        const callsBefore = second!.answered("eth_call")
        const outcome = yield* paymentsWhile(first!, rateLimited, Effect.sleep("10 seconds"))
        console.log(
          `rate limit: ${outcome.orders.length} payments, ${first!.errorsAnswered("eth_call")} eth_call answered 429 by endpoint 1, ` +
            `${second!.answered("eth_call") - callsBefore} eth_call by endpoint 2, ${outcome.readies.length} /ready`
        )
        expect(outcome.orders.length).toBeGreaterThan(0)
        // Endpoint 1 was asked (it is the one in use) and refused; every verifying call was answered by endpoint 2.
        expect(first!.errorsAnswered("eth_call")).toBeGreaterThan(0)
        expect(second!.answered("eth_call") - callsBefore).toBeGreaterThanOrEqual(outcome.orders.length)
        expect(outcome.readies.filter((answer) => answer.status !== 200)).toEqual([])
        expect(outcome.readies.some((answer) => answer.degraded.includes("1 rate-limited"))).toBe(true)
        expect(outcome.readies.flatMap((answer) => answer.degraded).filter((d) => d !== "1 rate-limited")).toEqual([])
      })
  )

  it.effect("endpoint 1 answering every method with a JSON-RPC error: /ready stays 200, every payment paid", () =>
    Effect.gen(function* () {
      const [first] = yield* ChainEndpoints
      const errorsBefore = first!.errorsAnswered()
      const outcome = yield* paymentsWhile(first!, failingEverything, Effect.sleep("5 seconds"))
      console.log(
        `server error: ${outcome.orders.length} payments, ${first!.errorsAnswered() - errorsBefore} calls answered -32603 by endpoint 1, ${outcome.readies.length} /ready`
      )
      expect(outcome.orders.length).toBeGreaterThan(0)
      expect(first!.errorsAnswered("eth_sendRawTransaction")).toBeGreaterThan(0)
      expect(outcome.readies.filter((answer) => answer.status !== 200)).toEqual([])
      expect(outcome.readies.some((answer) => answer.degraded.includes("1 server-error"))).toBe(true)
    })
  )

  it.effect.skipIf(withoutPromtool)("the degraded gauge and the endpoint-error count pass promtool check metrics", () =>
    Effect.gen(function* () {
      const [first] = yield* ChainEndpoints
      const text = prometheusText(yield* Metric.snapshot)
      expect(promtoolProblems(text)).toBe("")
      const host = new URL(first!.url).host
      expect(text).toContain("# TYPE chain_rpc_endpoint_degraded gauge")
      expect(text).toMatch(
        new RegExp(`chain_rpc_requests_total\\{endpoint="1",host="${host}",outcome="endpoint-error"\\} [1-9]`)
      )
    })
  )
})
