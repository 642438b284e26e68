/**
 * The JSON-RPC budget of a payment (issue 26, item 4), counted at the endpoint on the devnet with
 * 1-second blocks, the watcher polling at half the block time as on a configured chain. In steady
 * state a payment costs its verifying multicall and its broadcast, nothing else of its own: no
 * simulation before signing (the multicall's still holds: nothing of ours touched the payer since),
 * no receipt read per transaction, no read per transaction to tell it final (CHAIN_CONFIRMATIONS 3:
 * the tracker re-checks every transaction on later heads, from the block hashes the watcher has).
 * What is left is per block: the head, the block's receipts.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { MULTICALL3_ADDRESS } from "../../src/chain/Multicall.js"
import { send } from "../support/http.js"
import { signedOrder } from "../support/settlements.js"
import { ChainEndpoints, devnetRpc, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const PAYERS = 25
/** Each payer pays in turn, like a client that waits for its answer; the first round warms up (gas, fees). */
const ROUNDS = 4
const CONFIRMATIONS = 3

/** Calls by label (`eth_call <to>` for calls) between two snapshots. */
const between = (before: ReadonlyMap<string, number>, after: ReadonlyMap<string, number>) =>
  new Map([...after].map(([label, n]) => [label, n - (before.get(label) ?? 0)] as const).filter(([, n]) => n > 0))

layer(
  testServer(
    { MERCHANT_PAY_TO: merchant.address, CHAIN_CONFIRMATIONS: String(CONFIRMATIONS) },
    { chain: multiEndpointTestChain(1, "4 seconds", "2 seconds", "500 millis") }
  ),
  { excludeTestServices: true }
)("the JSON-RPC budget of a payment", (it) => {
  it.effect(
    "in steady state a payment costs its verifying multicall and its broadcast; the rest is per block",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const sql = yield* SqlClient.SqlClient
        const [endpoint] = yield* ChainEndpoints
        const payers = Array.from({ length: PAYERS }, () => privateKeyToAccount(generatePrivateKey()))
        for (const payer of payers) {
          yield* mintUsd1(devnet, payer.address, enoughFor(String(ROUNDS), ROUNDS)).pipe(Effect.orDie)
        }
        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* devnetRpc(devnet, "evm_setIntervalMining", [1])
        const headOf = devnetRpc(devnet, "eth_blockNumber").pipe(
          Effect.map((answer) => BigInt((answer as { result: string }).result))
        )

        const pay = (payer: (typeof payers)[number]) =>
          Effect.gen(function* () {
            const { id, header } = yield* signedOrder(payer, "1", "budget")
            const paid = yield* send("POST", `/merchant/orders/${id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })
            expect([200, 202]).toContain(paid.status)
            yield* eventually(
              `order ${id} to be paid`,
              send("GET", `/merchant/orders/${id}`).pipe(Effect.map((response) => response.body.status)),
              (status) => status === "paid"
            )
            return id
          })

        yield* Effect.forEach(payers, pay, { concurrency: "unbounded" })
        const before = endpoint!.answeredByLabel()
        const headBefore = yield* headOf
        const paid = yield* Effect.forEach(
          payers,
          (payer) => Effect.forEach(Array.from({ length: ROUNDS - 1 }), () => pay(payer)),
          { concurrency: "unbounded" }
        )
        // Final, every one of them: the tracker re-checked each until CONFIRMATIONS deep.
        yield* eventually(
          "every relayed transaction to be final",
          sql<{ readonly unfinal: number }>`
            SELECT count(*)::int AS unfinal FROM relayed_transactions WHERE status IN ('pending', 'mined')`,
          ([row]) => row?.unfinal === 0
        )
        const head = yield* headOf
        const calls = between(before, endpoint!.answeredByLabel())
        const payments = paid.flat().length
        const blocks = Number(head - headBefore) + 1
        const total = [...calls.values()].reduce((sum, n) => sum + n, 0)
        console.log(
          `${payments} payments over ${blocks} blocks: ${(total / payments).toFixed(2)} calls per payment; ` +
            [...calls]
              .sort(([, a], [, b]) => b - a)
              .map(([label, n]) => `${label} ${(n / payments).toFixed(2)}`)
              .join(", ")
        )
        const count = (label: string) => calls.get(label) ?? 0
        // Per payment: the verifying multicall (against the pending state) and the broadcast, once each.
        expect(count(`eth_call ${MULTICALL3_ADDRESS.toLowerCase()} pending`)).toBe(payments)
        expect(count("eth_sendRawTransaction")).toBe(payments)
        // No simulation before signing, no gas estimate, no receipt or transaction read by hash.
        expect(count(`eth_call ${devnet.usd1.toLowerCase()} pending`)).toBe(0)
        // The price refresher reads every token's feed and pause flag in one multicall (at the
        // latest block), never a token's contract on its own.
        const contractReads = [...calls.keys()].filter((label) => label.startsWith("eth_call "))
        for (const label of contractReads) expect(label).toMatch(`eth_call ${MULTICALL3_ADDRESS.toLowerCase()} `)
        expect(count("eth_estimateGas")).toBe(0)
        expect(count("eth_getTransactionReceipt")).toBe(0)
        expect(count("eth_getTransactionByHash")).toBe(0)
        // Per block: the block's receipts at most once.
        expect(count("eth_getBlockReceipts")).toBeLessThanOrEqual(blocks)
      }),
    240_000
  )

  it.effect(
    "two payments of one payer at once: the later reservation finds the other unsettled and is simulated again before signing",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const [endpoint] = yield* ChainEndpoints
        const payer = privateKeyToAccount(generatePrivateKey())
        yield* mintUsd1(devnet, payer.address, enoughFor("2", 2)).pipe(Effect.orDie)
        const offers = yield* Effect.forEach([1, 2], () => signedOrder(payer, "1", "twice"))
        const simulatedBefore = endpoint!.answeredByLabel().get(`eth_call ${devnet.usd1.toLowerCase()} pending`) ?? 0
        yield* Effect.forEach(
          offers,
          (offer) =>
            send("POST", `/merchant/orders/${offer.id}/pay`, { headers: { "PAYMENT-SIGNATURE": offer.header } }),
          { concurrency: "unbounded" }
        )
        yield* Effect.forEach(offers, (offer) =>
          eventually(
            `order ${offer.id} to be paid`,
            send("GET", `/merchant/orders/${offer.id}`).pipe(Effect.map((response) => response.body.status)),
            (status) => status === "paid"
          )
        )
        const simulated =
          (endpoint!.answeredByLabel().get(`eth_call ${devnet.usd1.toLowerCase()} pending`) ?? 0) - simulatedBefore
        // Whichever reserved second saw the first unsettled (or, reserved first, saw the other added
        // since its read): at least one, at most both, simulated right before signing.
        expect(simulated).toBeGreaterThanOrEqual(1)
        expect(simulated).toBeLessThanOrEqual(2)
      }),
    120_000
  )
})
