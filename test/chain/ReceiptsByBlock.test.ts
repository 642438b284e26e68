/**
 * Receipts by block on the devnet with 1-second blocks, counted at the JSON-RPC endpoint: senders
 * waiting for their receipts cost no receipt call of their own; the replica's watcher reads each
 * block that holds them once.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Option, Redacted } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { ChainEndpoints, devnetRpc, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"

const SENDERS = [1, 2, 3, 4, 5, 6]

describe("receipts by block", () => {
  it.live(
    "six senders wait for three transactions each: no receipt read per transaction, one block read per block",
    () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const devnet = yield* TestDevnet
        const [endpoint] = yield* ChainEndpoints
        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* devnetRpc(devnet, "evm_setIntervalMining", [1])
        const to = privateKeyToAccount(generatePrivateKey()).address
        const headBefore = yield* chain.headBlock
        const receiptsBefore = endpoint!.answered("eth_getTransactionReceipt")
        const blockReadsBefore = endpoint!.answered("eth_getBlockReceipts")

        const mined = yield* Effect.forEach(
          SENDERS,
          (i) =>
            Effect.gen(function* () {
              const account = chain.account(Redacted.make(ANVIL_ACCOUNT_KEYS[i]!))
              const blocks: Array<bigint> = []
              for (let k = 0; k < 3; k++) {
                const sent = yield* account.transferUsd1(to, 0n, () => Effect.void)
                const receipt = yield* chain.receipt(sent.hash, 30_000)
                expect(Option.isSome(receipt)).toBe(true)
                const got = Option.getOrThrow(receipt)
                expect(got.hash).toBe(sent.hash)
                expect(got.status).toBe("success")
                blocks.push(got.blockNumber)
              }
              return blocks
            }),
          { concurrency: "unbounded" }
        )
        const headAfter = yield* chain.headBlock
        expect(mined.flat()).toHaveLength(SENDERS.length * 3)
        expect(endpoint!.answered("eth_getTransactionReceipt") - receiptsBefore).toBe(0)
        // at most one read of each block that came meanwhile (each held some awaited transaction)
        expect(endpoint!.answered("eth_getBlockReceipts") - blockReadsBefore).toBeLessThanOrEqual(
          Number(headAfter - headBefore)
        )
      }).pipe(Effect.provide(multiEndpointTestChain(1, "4 seconds", "2 seconds"))),
    120_000
  )
})
