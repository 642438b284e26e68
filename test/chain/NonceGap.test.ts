/**
 * The relayer's nonce gap check (`followRelayerNonce`) against a broadcast that is answered while
 * the check runs: the node counts the transaction only once it has it, so a check that read the
 * chain's count before then must not take that nonce for a gap and send the transaction again.
 * The relayer, the journal callback and the node are real; the endpoint holds the broadcast.
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { getAddress, parseUnits, toHex } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { ChainClient, type SignedTransaction } from "../../src/chain/ChainClient.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
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
  }
)
