/**
 * EvmChain's JSON-RPC behaviour against a real devnet reached through a TCP proxy that a test stalls
 * (a node that accepts and never answers) or cuts (a node that is down): what a failing node is
 * reported as, how the relayer's kept nonce recovers, what a re-sent transaction finds, and how an
 * out-of-gas revert is told from another.
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, Option, Redacted, Ref } from "effect"
import { erc20Abi, getAddress, type Hex, parseTransaction, parseUnits, toHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import type { Address } from "../../src/chain/Address.js"
import { ChainClient, ChainError, type SignedTransaction } from "../../src/chain/ChainClient.js"
import { DEVNET_RELAYER_KEY } from "../../src/chain/Deployment.js"
import { ANVIL_ACCOUNT_KEYS, awaitReceipt, publicClientFor, walletClientFor } from "../../src/chain/Devnet.js"
import { counterfactualSignature, createSmartAccount, smartAccountAddress } from "../../src/chain/DevnetOperator.js"
import { transferWithAuthorizationTypedData } from "../../src/chain/Eip3009.js"
import { ChainProxy, devnetRpc, proxiedTestChain, TestDevnet, withNode } from "../support/TestChain.js"
import { eventually } from "../support/wait.js"
import { signedTransfer } from "../support/x402.js"

const units = (amount: string) => parseUnits(amount, 18)
const randomAddress = (): Address => getAddress(toHex(randomBytes(20)))
const noRecord = () => Effect.void

/** Waits for a transaction sent straight to the devnet (not through the proxy). */
const mined = (hash: Hex) =>
  Effect.flatMap(TestDevnet, (devnet) => awaitReceipt(devnet, hash, "the test's transaction").pipe(Effect.orDie))

/** A payer's signed EIP-3009 authorization of `value` USD1 to a fresh address. */
const authorized = (payerKey: Hex, value: bigint) =>
  signedTransfer(privateKeyToAccount(payerKey), randomAddress(), value)

/** Relays a fresh authorization of 1 USD1 from dev account 1, recording with `record`. */
const relay = <E>(record: (signed: SignedTransaction) => Effect.Effect<void, E>) =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const { authorization, signature } = yield* authorized(ANVIL_ACCOUNT_KEYS[1]!, units("1"))
    const signed = yield* chain.transferWithAuthorization(authorization, signature, record)
    return { signed, authorization }
  })

layer(proxiedTestChain("1 second"), { excludeTestServices: true, timeout: "120 seconds" })(
  "EvmChain over JSON-RPC",
  (it) => {
    it.effect("a contract wallet's signature is true or false while the node answers, a ChainError while not", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const devnet = yield* TestDevnet
        const owner = privateKeyToAccount(generatePrivateKey())
        const account = { owner: owner.address, salt: 0n }
        const wallet = yield* smartAccountAddress(devnet, account)
        const message = "sign in to the card app"
        const signature = yield* Effect.promise(() => owner.signMessage({ message }))
        const forged = yield* Effect.promise(() => privateKeyToAccount(generatePrivateKey()).signMessage({ message }))

        // Not deployed yet: ERC-6492 (the factory call deploys it in simulation); its owner's bare
        // signature proves nothing yet.
        expect(yield* chain.verifyMessage(wallet, message, counterfactualSignature(devnet, account, signature))).toBe(
          true
        )
        expect(yield* chain.verifyMessage(wallet, message, counterfactualSignature(devnet, account, forged))).toBe(
          false
        )
        expect(yield* chain.verifyMessage(wallet, message, signature)).toBe(false)
        for (const mode of ["stall", "refuse"] as const) {
          const failed = yield* withNode(
            mode,
            Effect.flip(chain.verifyMessage(wallet, message, counterfactualSignature(devnet, account, signature)))
          )
          expect(failed).toBeInstanceOf(ChainError)
        }

        // Deployed: ERC-1271, with a bare or still wrapped signature.
        expect(yield* createSmartAccount(devnet, account)).toBe(wallet)
        expect(yield* chain.verifyMessage(wallet, message, signature)).toBe(true)
        expect(yield* chain.verifyMessage(wallet, message, counterfactualSignature(devnet, account, signature))).toBe(
          true
        )
        expect(yield* chain.verifyMessage(wallet, message, forged)).toBe(false)
        for (const mode of ["stall", "refuse"] as const) {
          const failed = yield* withNode(mode, Effect.flip(chain.verifyMessage(wallet, message, signature)))
          expect(failed).toBeInstanceOf(ChainError)
        }
        // An EOA's own signature needs no chain.
        expect(yield* withNode("refuse", chain.verifyMessage(owner.address, message, signature))).toBe(true)
      })
    )

    it.effect("reads, the transfer check and gas estimates fail with ChainError when the node does not answer", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const account = chain.account(Redacted.make(generatePrivateKey()))
        yield* Option.getOrThrow(chain.faucet).fund(account.address, { usd1: units("5"), tokens: [] })
        const { authorization, signature } = yield* authorized(ANVIL_ACCOUNT_KEYS[1]!, units("1"))

        for (const mode of ["stall", "refuse"] as const) {
          const failures = yield* withNode(
            mode,
            Effect.all([
              Effect.flip(chain.balanceOf(chain.usd1.address, account.address)),
              Effect.flip(chain.transferCheck(authorization, signature)),
              // the gas estimate (a simulation) did not answer: not a refusal of the call
              Effect.flip(account.transferUsd1(randomAddress(), units("1"), noRecord))
            ])
          )
          for (const failure of failures) expect(failure).toBeInstanceOf(ChainError)
        }
        // answered again, the same calls go through
        expect(yield* chain.balanceOf(chain.usd1.address, account.address)).toBe(units("5"))
        const check = yield* chain.transferCheck(authorization, signature)
        expect(check).toMatchObject({ used: false, refusal: Option.none() })
      })
    )

    it.effect("the transfer check reads the nonce, the balance and the token's own verdict at once", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const pauper = generatePrivateKey()
        const broke = yield* authorized(pauper, units("1"))
        const forged = yield* authorized(ANVIL_ACCOUNT_KEYS[1]!, units("1"))
        const forgedSignature = yield* Effect.promise(() =>
          privateKeyToAccount(pauper).signTypedData(transferWithAuthorizationTypedData(forged.authorization, chain))
        )
        const spent = yield* relay(noRecord)
        yield* chain.receipt(spent.signed.hash, 10_000)
        const reused = yield* authorized(ANVIL_ACCOUNT_KEYS[1]!, units("1"))

        const brokeCheck = yield* chain.transferCheck(broke.authorization, broke.signature)
        expect(brokeCheck.balance).toBe(0n)
        expect(Option.getOrThrow(brokeCheck.refusal)).toBe("ERC20InsufficientBalance")
        const forgedCheck = yield* chain.transferCheck(forged.authorization, forgedSignature)
        expect(forgedCheck).toMatchObject({ used: false, refusal: Option.some("USD1: invalid signature") })
        const usedCheck = yield* chain.transferCheck(
          { ...reused.authorization, nonce: spent.authorization.nonce },
          reused.signature
        )
        expect(usedCheck.used).toBe(true)
      })
    )

    it.effect("re-sending a mined transaction finds it known; one whose nonce went to another, replaced", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const account = chain.account(Redacted.make(generatePrivateKey()))
        yield* Option.getOrThrow(chain.faucet).fund(account.address, { usd1: units("5"), tokens: [] })
        const unsent = yield* Ref.make(Option.none<SignedTransaction>())
        // signed and never broadcast: its record failed
        yield* Effect.flip(
          account.transferUsd1(randomAddress(), units("1"), (tx) =>
            Effect.zipRight(Ref.set(unsent, Option.some(tx)), Effect.fail("record failed"))
          )
        )
        const other = yield* account.transferUsd1(randomAddress(), units("2"), noRecord)
        expect(Option.getOrThrow(yield* chain.receipt(other.hash, 10_000)).status).toBe("success")
        const lost = Option.getOrThrow(yield* Ref.get(unsent))
        expect(lost.nonce).toBe(other.nonce)

        expect(yield* chain.rebroadcast(other.raw)).toBe("known")
        expect(yield* chain.rebroadcast(lost.raw)).toBe("replaced")
        expect(yield* withNode("refuse", Effect.flip(chain.rebroadcast(other.raw)))).toBeInstanceOf(ChainError)

        // Priced out (a fee below the block's base fee, as in a fee spike): the node answered, no outage.
        const pricedOut = yield* Effect.promise(() =>
          privateKeyToAccount(ANVIL_ACCOUNT_KEYS[2]!).signTransaction({
            chainId: chain.chainId,
            nonce: 0,
            gas: 21_000n,
            to: randomAddress(),
            maxFeePerGas: 1n,
            maxPriorityFeePerGas: 1n
          })
        )
        expect(yield* chain.rebroadcast(pricedOut)).toBe("underpriced")
      })
    )

    it.effect("a head whose base fee outruns the kept fee estimate: the next transfer is signed with a fresh one", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const devnet = yield* TestDevnet
        // The estimate is read and kept (FEES_REUSED_MS) by this transfer.
        const before = yield* relay(noRecord)
        expect(Option.getOrThrow(yield* chain.receipt(before.signed.hash, 10_000)).status).toBe("success")
        const spike = parseUnits("100", 9)
        yield* devnetRpc(devnet, "anvil_setNextBlockBaseFeePerGas", [toHex(spike)])
        yield* devnetRpc(devnet, "evm_mine")
        const spiked = yield* Effect.promise(() => publicClientFor(devnet).getBlockNumber())
        yield* eventually(
          "the block watcher to read the spiked block",
          chain.watchedHead,
          (head) => head.number >= spiked
        )
        // Signed with the kept estimate, the node would refuse it as underpriced.
        const after = yield* relay(noRecord)
        const fees = parseTransaction(after.signed.raw)
        expect(fees.maxFeePerGas).toBeGreaterThan(spike)
        expect(Option.getOrThrow(yield* chain.receipt(after.signed.hash, 10_000)).status).toBe("success")
      })
    )

    it.effect(
      "the relayer's kept nonce, made stale by another sender of its key, is read again and the transfer re-signed",
      () =>
        Effect.gen(function* () {
          const chain = yield* ChainClient
          const devnet = yield* TestDevnet
          const first = yield* relay(noRecord)
          expect(Option.getOrThrow(yield* chain.receipt(first.signed.hash, 10_000)).status).toBe("success")
          // The same key sends behind the service's back: the nonce it keeps is taken.
          const relayerKey = walletClientFor(devnet, DEVNET_RELAYER_KEY)
          yield* mined(
            yield* Effect.promise(() => relayerKey.sendTransaction({ to: relayerKey.account.address, value: 0n }))
          )

          const recorded = yield* Ref.make<ReadonlyArray<SignedTransaction>>([])
          const second = yield* relay((tx) => Ref.update(recorded, (all) => [...all, tx]))
          expect((yield* Ref.get(recorded)).map((tx) => tx.nonce)).toEqual([
            first.signed.nonce + 1,
            first.signed.nonce + 2
          ])
          expect(second.signed.nonce).toBe(first.signed.nonce + 2)
          const receipt = Option.getOrThrow(yield* chain.receipt(second.signed.hash, 10_000))
          expect(receipt.status).toBe("success")
          expect(receipt.transfers).toEqual([
            {
              token: chain.usd1.address,
              from: second.authorization.from,
              to: second.authorization.to,
              value: units("1")
            }
          ])
        })
    )

    it.effect("a transfer that would revert now is refused right before it is signed, though its gas is known", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const devnet = yield* TestDevnet
        // Known gas: one (v, r, s) transfer went out, so the next ones reuse its estimate.
        yield* relay(noRecord)
        const payerKey = generatePrivateKey()
        yield* Option.getOrThrow(chain.faucet).fund(privateKeyToAccount(payerKey).address, {
          usd1: units("1"),
          tokens: []
        })
        const first = yield* authorized(payerKey, units("1"))
        const second = yield* authorized(payerKey, units("1"))
        // Both pass the check made before any is sent: each alone is covered.
        for (const { authorization, signature } of [first, second]) {
          expect((yield* chain.transferCheck(authorization, signature)).refusal).toEqual(Option.none())
        }
        const sent = yield* chain.transferWithAuthorization(first.authorization, first.signature, noRecord)
        const relayerSent = () =>
          Effect.promise(() =>
            publicClientFor(devnet).getTransactionCount({ address: chain.relayers[0]!, blockTag: "pending" })
          )
        const before = yield* relayerSent()
        const recorded = yield* Ref.make(0)
        const refused = yield* Effect.flip(
          chain.transferWithAuthorization(second.authorization, second.signature, () =>
            Ref.update(recorded, (n) => n + 1)
          )
        )
        expect(refused).toMatchObject({ _tag: "CallReverted", reason: "ERC20InsufficientBalance" })
        expect(yield* Ref.get(recorded)).toBe(0)
        expect(yield* relayerSent()).toBe(before)
        expect(Option.getOrThrow(yield* chain.receipt(sent.hash, 10_000)).status).toBe("success")
      })
    )

    it.effect("a broadcast that fails takes no nonce: the relayer's next send uses it", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const proxy = yield* ChainProxy
        const recorded = yield* Ref.make(Option.none<SignedTransaction>())
        // The node goes down between the record and the broadcast.
        const failed = yield* Effect.flip(
          relay((tx) =>
            Effect.zipRight(
              Ref.set(recorded, Option.some(tx)),
              Effect.sync(() => proxy.setMode("refuse"))
            )
          )
        ).pipe(Effect.ensuring(Effect.sync(() => proxy.setMode("forward"))))
        expect(failed).toBeInstanceOf(ChainError)
        const lost = Option.getOrThrow(yield* Ref.get(recorded))
        expect(yield* chain.receipt(lost.hash, 200)).toEqual(Option.none())

        // The lost transaction never reached the node: its nonce is the next one (no gap).
        const next = yield* relay(noRecord)
        expect(next.signed.nonce).toBe(lost.nonce)
        expect(Option.getOrThrow(yield* chain.receipt(next.signed.hash, 10_000)).status).toBe("success")
      })
    )

    it.effect("a receipt tells a revert that ran out of gas from one that did not", () =>
      Effect.gen(function* () {
        const chain = yield* ChainClient
        const devnet = yield* TestDevnet
        const sender = walletClientFor(devnet, ANVIL_ACCOUNT_KEYS[2]!)
        const transfer = (amount: bigint, gas: bigint) =>
          Effect.promise(() =>
            sender.writeContract({
              address: devnet.usd1,
              abi: erc20Abi,
              functionName: "transfer",
              args: [randomAddress(), amount],
              gas
            })
          )
        const starved = yield* transfer(1n, 25_000n)
        const refused = yield* transfer(units("1000000"), 200_000n)
        const fine = yield* transfer(1n, 200_000n)
        for (const hash of [starved, refused, fine]) yield* mined(hash)

        expect(Option.getOrThrow(yield* chain.receipt(starved, 1_000))).toMatchObject({
          status: "reverted",
          outOfGas: true
        })
        expect(Option.getOrThrow(yield* chain.receipt(refused, 1_000))).toMatchObject({
          status: "reverted",
          outOfGas: false
        })
        expect(Option.getOrThrow(yield* chain.receipt(fine, 1_000))).toMatchObject({
          status: "success",
          outOfGas: false
        })
      })
    )
  }
)
