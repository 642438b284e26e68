/**
 * Events across replicas: the real service as two processes over one database and one devnet. A
 * card holder's stream is held by replica A; a payment settled by replica B and a live refill made
 * by B's agent loop arrive on it; A's shutdown ends the stream with `close` and does not wait for
 * it; a stream outlives the HTTP request timeouts.
 */
import { FetchHttpClient } from "@effect/platform"
import { describe, expect, it } from "@effect/vitest"
import { Duration, Effect, Either } from "effect"
import { parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { readEvents } from "../support/events.js"
import { callService, devnetServiceEnv, sandboxCardHolder, startService, stopService } from "../support/process.js"
import { devnetWithDatabase, devnetRpc as rpc } from "../support/TestChain.js"
import { DEFAULT_WAIT } from "../support/wait.js"
import { signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())

describe("events across replicas", () => {
  it.live(
    "a payment through B and a live refill by B's loop arrive on A's stream; A's shutdown closes it",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        const shared = {
          MERCHANT_PAY_TO: merchant.address,
          AGENT_WALLET_SEED: "events-replica-seed-0123456789abcdef",
          KYC_SANDBOX_SECRET: "events-replica-sandbox-secret",
          CARD_DATA_KEY: "3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f10",
          EVENTS_HEARTBEAT: "1 second",
          // Far shorter than the stream lives: a stream is not a request that must arrive in time.
          HTTP_HEADERS_TIMEOUT: "1 second",
          HTTP_REQUEST_TIMEOUT: "2 seconds",
          // Far longer than the test waits for A to stop: its streams must not hold it up.
          SHUTDOWN_GRACE: "5 minutes"
        }
        const a = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, { ...shared, AGENT_MODE: "off" }))
        const b = yield* startService(
          yield* devnetServiceEnv(devnet, databaseUrl, { ...shared, AGENT_MODE: "live", AGENT_INTERVAL: "2 seconds" })
        )
        yield* Effect.addFinalizer(() =>
          Effect.all([stopService(a, "SIGTERM"), stopService(b, "SIGTERM")], { concurrency: 2 })
        )

        const holder = yield* sandboxCardHolder(a)
        const events = yield* readEvents({ token: holder.token, baseUrl: a.baseUrl, reconnect: false })
        yield* events.await("ready", (event) => event.event === "ready")

        // A payment of $15 (and the order's own value below a micro-dollar) from the card, settled by B,
        // that leaves the card $5.
        const order = (yield* callService(b, "POST", "/merchant/orders", {
          json: { amount: "15", description: "On B" }
        })).body
        const offer = yield* callService(b, "GET", `/merchant/orders/${order.id}/pay`)
        const asked = BigInt(offer.body.accepts[0].amount)
        yield* mintUsd1(devnet, holder.account.address, asked + parseUnits("5", 18)).pipe(Effect.orDie)
        const { header } = yield* Effect.promise(() => signPayment(holder.account, offer.body))
        const paid = yield* callService(b, "POST", `/merchant/orders/${order.id}/pay`, {
          headers: { "payment-signature": header }
        })
        expect(paid.status).toBe(200)
        const payment = yield* events.await("the payment settled by B", (event) => event.event === "payment")
        expect(payment).toMatchObject({ event: "payment", data: { id: order.id, usd: 15, description: "On B" } })

        // The card is at $5, below the $10 floor: B's loop refills it from the agent wallet's cash.
        const strategy = yield* callService(b, "PUT", "/strategy", {
          token: holder.token,
          json: { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 0 }
        })
        expect(strategy.status).toBe(200)
        yield* events.await("the strategy set through B", (event) => event.event === "strategy")
        const { wallet } = (yield* callService(b, "GET", "/portfolio", { token: holder.token })).body
        yield* rpc(devnet, "anvil_setBalance", [wallet, "0xde0b6b3a7640000"])
        yield* mintUsd1(devnet, wallet, parseUnits("25", 18)).pipe(Effect.orDie)
        const refill = yield* events.await("the refill made by B's loop", (event) => event.event === "refill")
        expect(refill).toMatchObject({ event: "refill", data: { type: "refill", usd: 5 } })
        const executed = yield* events.await(
          "the executed refill decision",
          (event) => event.event === "decision" && event.data.status === "executed"
        )
        expect(executed).toMatchObject({ data: { action: "refill", symbol: "USD1" } })
        // The statement on A says what the events said.
        const statement = (yield* callService(a, "GET", "/me/activity", { token: holder.token })).body
        expect(statement).toEqual([
          refill.event === "refill" ? refill.data : undefined,
          payment.event === "payment" ? payment.data : undefined
        ])
        // Every id once, in order, on one stream that outlived HTTP_REQUEST_TIMEOUT many times over.
        const ids = events
          .received()
          .flatMap((event) => (event.event === "ready" || event.event === "close" ? [] : [event.id]))
        expect(ids).toEqual(ids.map((_, i) => ids[0]! + i))

        // A stops: the stream ends with `close` (shutdown), and A does not wait for it.
        const stopped = yield* stopService(a, "SIGTERM").pipe(
          Effect.timeoutFail({
            duration: DEFAULT_WAIT,
            onTimeout: () => new Error(`A did not stop within ${Duration.format(DEFAULT_WAIT)}`)
          }),
          Effect.orDie
        )
        expect(stopped).toBe(0)
        const ended = yield* events.ended
        expect(Either.isRight(ended)).toBe(true)
        expect(events.received().at(-1)).toMatchObject({ event: "close", data: { reason: "shutdown" } })
      }).pipe(Effect.scoped, Effect.provide(FetchHttpClient.layer)),
    240_000
  )
})
