/**
 * The relayer's nonce gap check (`followRelayerNonce`) against a broadcast that is answered while
 * the check runs: the node counts the transaction only once it has it, so a check that read the
 * chain's count before then must not take that nonce for a gap and send the transaction again.
 * The relayer, the journal callback and the node are real; the endpoint holds the broadcast. And a
 * gap that stays open over several checks: counted and logged once (issue 44, item 4). And a fee
 * spike over a gap: a nonce the journal holds a transaction for is never filled, even while the node
 * refuses that transaction; a fill counts once the node took it (issue 44, item 3).
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Logger } from "effect"
import { createPublicClient, getAddress, type Hex, http, isAddressEqual, parseGwei, parseUnits, toHex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { ChainClient, type SignedTransaction } from "../../src/chain/ChainClient.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { metricValue } from "../support/metrics.js"
import { ChainEndpoints, devnetRpc, multiEndpointTestChain, TestDevnet } from "../support/TestChain.js"
import { eventually } from "../support/wait.js"
import { signedTransfer } from "../support/x402.js"

const gapCount = (action: "resent" | "filled") =>
  metricValue(`relayer_nonce_gap_transactions_total{action="${action}"}`)

/**
 * Two transfers from `payerKey` the node never receives (the endpoint drops them, and keeps dropping
 * until the test says otherwise): the first recorded (`kept`), the second's record lost (`lost`); and
 * the gap counters before them.
 */
const twoUnsent = (payerKey: Hex) =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const [endpoint] = yield* ChainEndpoints
    const payer = privateKeyToAccount(payerKey)
    const to = getAddress(toHex(randomBytes(20)))
    const journal: Array<SignedTransaction> = []
    const record = (signed: SignedTransaction) => Effect.sync(() => journal.push(signed))
    const resentBefore = yield* gapCount("resent")
    const filledBefore = yield* gapCount("filled")
    endpoint!.dropTransactions(true)
    for (const value of ["1", "2"]) {
      const transfer = yield* signedTransfer(payer, to, parseUnits(value, 18))
      yield* chain.transferWithAuthorization(transfer.authorization, transfer.signature, record)
    }
    const [kept, lost] = journal.slice(-2)
    return { kept: kept!, lost: lost!, gapCount, resentBefore, filledBefore }
  })

layer(multiEndpointTestChain(1, "4 seconds", "2 seconds"), { excludeTestServices: true, timeout: "60 seconds" })(
  "the relayer's nonce gap check",
  (it) => {
    it.effect("a broadcast answered while the check runs is no gap: nothing is sent again", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const [endpoint] = yield* ChainEndpoints
        const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[1]!)
        const to = getAddress(toHex(randomBytes(20)))
        const journal: Array<SignedTransaction> = []
        const record = (signed: SignedTransaction) => Effect.sync(() => journal.push(signed))
        // A first payment: the relayer knows its next nonce from then on.
        const first = yield* signedTransfer(payer, to, parseUnits("1", 18))
        yield* chain.transferWithAuthorization(first.authorization, first.signature, record)

        endpoint!.holdTransactions(true)
        const second = yield* signedTransfer(payer, to, parseUnits("1", 18))
        const sending = yield* Effect.fork(
          chain.transferWithAuthorization(second.authorization, second.signature, record)
        )
        yield* eventually("the broadcast to be on its way", Effect.sync(endpoint!.heldTransactions), (n) => n === 1)
        const broadcastsBefore = endpoint!.answered("eth_sendRawTransaction")

        const [check] = yield* chain.followRelayerNonce(() =>
          // The chain's count is read by now; the broadcast reaches the node and is answered.
          Effect.gen(function* () {
            endpoint!.holdTransactions(false)
            const sent = yield* Fiber.join(sending).pipe(Effect.orDie)
            return [{ nonce: sent.nonce, raw: sent.raw }]
          })
        )
        const sent = journal.at(-1)!
        expect(check).toEqual({ chainNext: sent.nonce, next: sent.nonce + 1, resent: 0, filled: 0 })
        expect(endpoint!.answered("eth_sendRawTransaction")).toBe(broadcastsBefore + 1)
      })
    )

    it.effect(
      "a gap open over four checks: its transactions counted once each, one WARN naming its nonces, one INFO when it closes",
      () =>
        Effect.gen(function* () {
          const chain = yield* ChainClient
          const [endpoint] = yield* ChainEndpoints
          const { kept, lost, gapCount, resentBefore, filledBefore } = yield* twoUnsent(ANVIL_ACCOUNT_KEYS[2]!)
          const resendable = () => Effect.succeed([{ nonce: kept!.nonce, raw: kept!.raw }])

          const lines: Array<string> = []
          const logged = Logger.replace(
            Logger.defaultLogger,
            Logger.make(({ logLevel, message }) => {
              const text = String(Array.isArray(message) ? message[0] : message)
              if (/nonce gap/.test(text)) lines.push(`${logLevel.label} ${text}`)
            })
          )
          const checks = yield* Effect.forEach([1, 2, 3], () => chain.followRelayerNonce(resendable)).pipe(
            Effect.provide(logged)
          )
          endpoint!.dropTransactions(false)
          const closing = yield* chain.followRelayerNonce(resendable).pipe(Effect.provide(logged))
          const closed = yield* chain.followRelayerNonce(resendable).pipe(Effect.provide(logged))

          // Each check sent the recorded one again and filled the other's nonce...
          for (const [check] of [...checks, closing]) expect([check!.resent, check!.filled]).toEqual([1, 1])
          expect(closed[0]).toMatchObject({ resent: 0, filled: 0 })
          // ...but the counter counts the gap's two transactions once each, and the log says it twice.
          expect((yield* gapCount("resent")) - resentBefore).toBe(1)
          expect((yield* gapCount("filled")) - filledBefore).toBe(1)
          const nonces = `${kept!.nonce}-${lost!.nonce}`
          expect(lines).toEqual([
            expect.stringMatching(
              new RegExp(
                `^WARN relayer nonce gap: .*; nonces ${nonces}: 1 recorded transaction\\(s\\) sent again, 1 nonce\\(s\\) filled$`
              )
            ),
            `INFO the relayer's nonce gap is closed: nonces ${nonces}; 1 recorded transaction(s) sent again, 1 nonce(s) filled`
          ])
        })
    )

    it.effect(
      "a fee spike over a gap: the journaled nonce waits, never filled; the other is filled once the node takes it, counted once",
      () =>
        Effect.gen(function* () {
          const chain = yield* ChainClient
          const devnet = yield* TestDevnet
          const [endpoint] = yield* ChainEndpoints
          const client = createPublicClient({ transport: http(devnet.rpcUrl), cacheTime: 0 })
          const setNextBaseFee = (gwei: string) =>
            devnetRpc(devnet, "anvil_setNextBlockBaseFeePerGas", [toHex(parseGwei(gwei))])
          const { kept, lost, gapCount, resentBefore, filledBefore } = yield* twoUnsent(ANVIL_ACCOUNT_KEYS[3]!)
          endpoint!.dropTransactions(false)
          const resendable = () => Effect.succeed([{ nonce: kept!.nonce, raw: kept!.raw }])
          const check = chain.followRelayerNonce(resendable).pipe(Effect.map(([only]) => only!))

          // The next block's base fee far above what anything was signed with: the node refuses the
          // recorded transaction and the fill alike, and neither counts.
          yield* setNextBaseFee("100")
          expect(yield* check).toMatchObject({ chainNext: kept!.nonce, resent: 0, filled: 0 })
          // A block at that base fee: fills are signed with the fee it asks, the recorded one keeps its own.
          yield* devnetRpc(devnet, "evm_mine")
          const taken = yield* eventually("the fill to be taken", check, (seen) => seen.filled === 1)
          // Queued behind the recorded one, which the node still refuses: the chain counts no further.
          expect(taken).toMatchObject({ chainNext: kept!.nonce, resent: 0 })
          // The spike over: the recorded transaction goes out at its own nonce, and the fill behind it.
          yield* setNextBaseFee("0.01")
          yield* eventually("the gap to close", check, (seen) => seen.chainNext === lost!.nonce + 1)

          // On chain from the recorded one's block: it at its own nonce, then the empty fill.
          const { blockNumber } = yield* Effect.promise(() => client.getTransactionReceipt({ hash: kept!.hash }))
          const head = yield* Effect.promise(() => client.getBlockNumber())
          const blocks = yield* Effect.forEach(Array.from({ length: Number(head - blockNumber) + 1 }), (_, i) =>
            Effect.promise(() => client.getBlock({ blockNumber: blockNumber + BigInt(i), includeTransactions: true }))
          )
          const relayed = blocks
            .flatMap((block) => block.transactions)
            .filter((tx) => isAddressEqual(tx.from, kept!.sender))
            .map((tx) => [tx.nonce, tx.hash === kept!.hash ? "recorded" : tx.input === "0x" ? "empty" : "other"])
          expect(relayed).toEqual([
            [kept!.nonce, "recorded"],
            [lost!.nonce, "empty"]
          ])
          // The counter counts what the node took: one sent again, one filled, however many checks refused.
          expect((yield* gapCount("resent")) - resentBefore).toBe(1)
          expect((yield* gapCount("filled")) - filledBefore).toBe(1)
        })
    )
  }
)
