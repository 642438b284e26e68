/**
 * EvmChain over two JSON-RPC endpoints of one devnet (each a proxy of the same anvil, standing for
 * two providers of one chain): the first killed, hung or dropping transactions under a stream of
 * payments and reads, and back again.
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Metric, Option } from "effect"
import { createPublicClient, getAddress, type Hex, http, parseUnits, toHex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import type { Address } from "../../src/chain/Address.js"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { prometheusText } from "../../src/observability/Metrics.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import { ChainEndpoints, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"
import { eventually } from "../support/wait.js"
import { signedTransfer } from "../support/x402.js"

/** Prometheus' own linter (Debian's `prometheus` package), as in test/e2e/Operations.test.ts. */

const randomAddress = (): Address => getAddress(toHex(randomBytes(20)))
const noRecord = () => Effect.void

/** Relays `value` USD1 from dev account `payer` (1-8) to `to` and waits for its receipt: the transfer mined. */
const pay = (payer: number, to: Address, value: bigint) =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const { authorization, signature } = yield* signedTransfer(
      privateKeyToAccount(ANVIL_ACCOUNT_KEYS[payer]!),
      to,
      value
    )
    const signed = yield* chain.transferWithAuthorization(authorization, signature, noRecord)
    const receipt = yield* chain.receipt(signed.hash, 30_000)
    expect(Option.map(receipt, (mined) => mined.status)).toEqual(Option.some("success"))
    return signed
  })

/** The relayer's transactions so far, read from the devnet itself. */
const relayerSent = Effect.gen(function* () {
  const devnet = yield* TestDevnet
  const chain = yield* ChainClient
  return yield* Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).getTransactionCount({
      address: chain.relayers[0]!,
      blockTag: "pending"
    })
  )
})

const stateOf = (endpoint: number) =>
  Effect.flatMap(ChainClient, (chain) =>
    Effect.map(chain.endpoints, (states) => states.find((state) => state.endpoint === endpoint)?.state)
  )

/**
 * Payments (`count`, one every 100 ms, each waited for) and four lanes of reads while `fault` runs;
 * answers the failures of both, the payments' total and the relayer's transactions meanwhile.
 */
const underLoad = <E, R>(count: number, fault: Effect.Effect<void, E, R>) =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const merchant = randomAddress()
    const sentBefore = yield* relayerSent
    const failures: Array<string> = []
    let reads = 0
    let loading = true
    const note = <A, E2, R2>(effect: Effect.Effect<A, E2, R2>) =>
      effect.pipe(Effect.catchAllCause((cause) => Effect.sync(() => void failures.push(String(cause).slice(0, 300)))))
    const reader = yield* Effect.fork(
      Effect.forEach(
        [0, 1, 2, 3],
        () =>
          Effect.whileLoop({
            while: () => loading,
            body: () =>
              note(Effect.all([chain.balanceOf(chain.usd1.address, merchant), chain.blockTime], { concurrency: 2 })),
            step: () => {
              reads++
            }
          }),
        { concurrency: 4, discard: true }
      )
    )
    const values = Array.from({ length: count }, (_, i) => parseUnits(`1.${String(i + 1).padStart(3, "0")}`, 18))
    const paying = yield* Effect.fork(
      Effect.forEach(
        values,
        (value, i) => Effect.sleep(`${i * 100} millis`).pipe(Effect.zipRight(note(pay(1 + (i % 8), merchant, value)))),
        { concurrency: "unbounded", discard: true }
      )
    )
    yield* fault
    yield* Fiber.join(paying)
    loading = false
    yield* Fiber.join(reader)
    return {
      failures,
      reads,
      received: yield* chain.balanceOf(chain.usd1.address, merchant),
      expected: values.reduce((sum, value) => sum + value, 0n),
      relayerSent: (yield* relayerSent) - sentBefore
    }
  })

layer(multiEndpointTestChain(2, "4 seconds", "100 millis"), { excludeTestServices: true, timeout: "120 seconds" })(
  "a chain over two JSON-RPC endpoints",
  (it) => {
    it.effect(
      "the first endpoint killed under payments and reads: nothing fails, each paid once; back, it is used again",
      () =>
        Effect.gen(function* () {
          const [first] = yield* ChainEndpoints
          const outcome = yield* underLoad(
            24,
            Effect.gen(function* () {
              yield* Effect.sleep("600 millis")
              yield* first!.kill
              yield* eventually("endpoint 1 down", stateOf(1), (state) => state === "down")
              yield* Effect.sleep("800 millis")
              yield* first!.revive
            })
          )
          expect(outcome.failures).toEqual([])
          expect(outcome.reads).toBeGreaterThan(0)
          // Every payment reached the merchant once, in one relayer transaction each.
          expect(outcome.received).toBe(outcome.expected)
          expect(outcome.relayerSent).toBe(24)

          yield* eventually("endpoint 1 up again", stateOf(1), (state) => state === "up")
          const broadcastsBefore = first!.answered("eth_sendRawTransaction")
          yield* pay(2, randomAddress(), parseUnits("1", 18))
          expect(first!.answered("eth_sendRawTransaction")).toBeGreaterThan(broadcastsBefore)
        })
    )

    it.effect("the first endpoint hung: reads answer within the read bound from the second, payments settle", () =>
      Effect.gen(function* () {
        const [first] = yield* ChainEndpoints
        const outcome = yield* underLoad(
          8,
          Effect.acquireUseRelease(
            Effect.sync(() => first!.stall()),
            () => Effect.sleep("1500 millis"),
            () => Effect.sync(() => first!.forward())
          )
        )
        expect(outcome.failures).toEqual([])
        expect(outcome.received).toBe(outcome.expected)
        expect(outcome.relayerSent).toBe(8)
        yield* eventually("endpoint 1 up again", stateOf(1), (state) => state === "up")
      })
    )

    it.effect("a transaction the first endpoint drops reaches the chain through the second; re-sent, it is known", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const [first, second] = yield* ChainEndpoints
        const to = randomAddress()
        first!.dropTransactions(true)
        const signed = yield* pay(3, to, parseUnits("2", 18)).pipe(
          Effect.ensuring(Effect.sync(() => first!.dropTransactions(false)))
        )
        expect(yield* chain.balanceOf(chain.usd1.address, to)).toBe(parseUnits("2", 18))
        expect(first!.answered("eth_sendRawTransaction")).toBeGreaterThan(0)
        expect(second!.answered("eth_sendRawTransaction")).toBeGreaterThan(0)
        // Mined: both nodes answer "nonce too low" (or "already known"), and both find it by its hash.
        expect(yield* chain.rebroadcast(signed.raw as Hex)).toBe("known")
      })
    )

    it.effect(
      "the first endpoint rate-limiting every call (HTTP 429, -32005): degraded, reads and payments go on; it comes back once it answers",
      () =>
        Effect.gen(function* () {
          const chain = yield* ChainClient
          const [first] = yield* ChainEndpoints
          const degradedOf = (endpoint: number) =>
            Effect.map(chain.endpoints, (states) => states.find((state) => state.endpoint === endpoint)?.degraded)
          first!.answerWithError({ httpStatus: 429, error: { code: -32005, message: "rate limit exceeded" } })
          const outcome = yield* underLoad(
            8,
            eventually("endpoint 1 degraded", degradedOf(1), (degraded) => degraded === "rate-limited").pipe(
              Effect.ensuring(Effect.sync(() => first!.answerWithError(undefined)))
            )
          )
          expect(outcome.failures).toEqual([])
          expect(outcome.received).toBe(outcome.expected)
          expect(outcome.relayerSent).toBe(8)
          expect(first!.errorsAnswered()).toBeGreaterThan(0)
          expect(yield* stateOf(1)).toBe("up")
          // Its backoff passed, its next answer ends the degradation.
          yield* eventually("endpoint 1 no longer degraded", degradedOf(1), (degraded) => degraded === undefined)
        })
    )

    it.effect.skipIf(withoutPromtool)("the endpoint metrics pass promtool check metrics, without a URL", () =>
      Effect.gen(function* () {
        const [first] = yield* ChainEndpoints
        const text = prometheusText(yield* Metric.snapshot)
        expect(promtoolProblems(text)).toBe("")
        const host = new URL(first!.url).host
        expect(text).toContain(`chain_rpc_endpoint_up{endpoint="1",host="${host}"} 1`)
        expect(text).toContain("# TYPE chain_rpc_requests_total counter")
        expect(text).toContain("# TYPE chain_rpc_endpoint_latency_seconds gauge")
        expect(text).toMatch(`chain_rpc_endpoint_degraded{endpoint="1",host="${host}"} `)
        expect(text).not.toContain("http://")
      })
    )

    it.effect("/ready's view: each endpoint's state and latency, never its URL", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const states = yield* eventually("both endpoints probed", chain.endpoints, (all) =>
          all.every((state) => state.latencyMs !== undefined)
        )
        expect(states.map(({ endpoint, state }) => ({ endpoint, state }))).toEqual([
          { endpoint: 1, state: "up" },
          { endpoint: 2, state: "up" }
        ])
        expect(JSON.stringify(states)).not.toContain("127.0.0.1")
      })
    )
  }
)
