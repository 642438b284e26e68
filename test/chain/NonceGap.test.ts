/**
 * The relayer's nonce gap check (`followRelayerNonce`) against a broadcast that is answered while
 * the check runs: the node counts the transaction only once it has it, so a check that read the
 * chain's count before then must not take that nonce for a gap and send the transaction again.
 * The relayer, the journal callback and the node are real; the endpoint holds the broadcast. And a
 * gap that stays open over several checks: counted and logged once (issue 44, item 4).
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Logger } from "effect"
import { getAddress, parseUnits, toHex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { ChainClient, type SignedTransaction } from "../../src/chain/ChainClient.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { metricValue } from "../support/metrics.js"
import { ChainEndpoints, multiEndpointTestChain } from "../support/TestChain.js"
import { eventually } from "../support/wait.js"
import { signedTransfer } from "../support/x402.js"

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
          const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[2]!)
          const to = getAddress(toHex(randomBytes(20)))
          const journal: Array<SignedTransaction> = []
          const record = (signed: SignedTransaction) => Effect.sync(() => journal.push(signed))
          const gapCount = (action: "resent" | "filled") =>
            metricValue(`relayer_nonce_gap_transactions_total{action="${action}"}`)
          const resentBefore = yield* gapCount("resent")
          const filledBefore = yield* gapCount("filled")

          // Two transfers the node never receives: the first recorded, the second's record lost.
          endpoint!.dropTransactions(true)
          for (const value of ["1", "2"]) {
            const transfer = yield* signedTransfer(payer, to, parseUnits(value, 18))
            yield* chain.transferWithAuthorization(transfer.authorization, transfer.signature, record)
          }
          const [kept, lost] = journal.slice(-2)
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
  }
)
