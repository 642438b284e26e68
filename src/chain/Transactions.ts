/**
 * A call made a sent transaction: simulated (a revert is `CallReverted`, nothing sent), signed
 * locally with the sender's nonce and the current fees, handed to the caller's `record`, then
 * broadcast once; and a signed transaction sent again. What the relayer and the service's own
 * accounts share; the relayer's pipelining is `Relayer.ts`'s.
 */
import { Duration, Effect, Option } from "effect"
import {
  type Hash,
  type Hex,
  hexToBigInt,
  hexToNumber,
  keccak256,
  type PrivateKeyAccount,
  parseTransaction,
  toHex
} from "viem"
import type { Address } from "./Address.js"
import type { BlockWatcher } from "./BlockWatcher.js"
import {
  CallReverted,
  ChainError,
  type Rebroadcast,
  type RecordSigned,
  type SignedPurpose,
  type SignedTransaction
} from "./ChainClient.js"
import type { RelayerFees } from "./Deployment.js"
import { bumpedFees, type Fees, feesOf } from "./FeeBump.js"
import type { FeeEstimate } from "./FeeEstimate.js"
import { isUnreachable, type JsonRpc } from "./JsonRpc.js"
import { chainCall, errorText, type Read, revertReason } from "./NodeErrors.js"
import type { SendQueue } from "./SendQueues.js"

/** A transaction to send: where, what, and the ether it carries. */
export interface Call {
  readonly to: Address
  readonly data: Hex
  readonly value?: bigint
}

/** A broadcast: sent, or refused for what a fresh signature can fix. */
type Broadcast =
  | { readonly _tag: "Sent" }
  | { readonly _tag: "Refused"; readonly stale: "nonce" | "fees"; readonly text: string }

/** What the node said to a broadcast it refused, when a fresh signature can fix it. */
const staleNonce = /nonce too low|replacement transaction underpriced/i
const lowFee = /fee per gas less than|fee cap|underpriced/i
const alreadyKnown = /already known|already imported|known transaction/i

/** Margin on a gas estimate used for this one call, and on the relayer's transfer gas reused for all. */
export const GAS_MARGIN_ONE = [12n, 10n] as const
export const GAS_MARGIN_REUSED = [3n, 2n] as const

export const withMargin = (gas: bigint, [numerator, denominator]: readonly [bigint, bigint]) =>
  (gas * numerator) / denominator

/** What a sender uses of the chain client: its reads, fees, send queues and block watcher. */
export interface SendingParts {
  readonly read: Read
  readonly fees: FeeEstimate
  readonly queueOf: (sender: Address) => SendQueue
  /** The block watcher, made after (it calls the relayer on each head): every send is expected by it. */
  readonly watcher: () => BlockWatcher
}

export interface TransactionsOptions extends SendingParts {
  readonly chainId: number
  /** The connection of the reads: bounded, retried once when unanswered. */
  readonly reads: JsonRpc
  /** Broadcasts: never repeated once the node may have read them. */
  readonly writes: JsonRpc
}

export const transactions = ({ chainId, reads, read, writes, fees, queueOf, watcher }: TransactionsOptions) => {
  /** The gas the call needs, sent by `from`; a refusal (a revert) is `CallReverted`, nothing sent. */
  const simulate = (from: Address, call: Call) =>
    Effect.tryPromise({
      try: (signal) =>
        reads.request<Hex>(
          "eth_estimateGas",
          [{ from, to: call.to, data: call.data, ...(call.value === undefined ? {} : { value: toHex(call.value) }) }],
          signal
        ),
      catch: (cause) =>
        isUnreachable(cause)
          ? new ChainError({ message: `estimate gas: ${errorText(cause)}`, cause })
          : new CallReverted({ reason: revertReason(cause) })
    }).pipe(Effect.map(hexToBigInt))

  /**
   * The exact call, run now as `from` would send it against the pending state (the transactions
   * already sent count, the block time is the next block's): a revert is `CallReverted`, nothing
   * sent. Unlike an estimate it needs no gas figure, so it is what a send that reuses a known gas
   * limit checks right before it signs.
   */
  const callAtPending = (from: Address, call: Call) =>
    Effect.tryPromise({
      try: (signal) =>
        reads.request<Hex>(
          "eth_call",
          [
            { from, to: call.to, data: call.data, ...(call.value === undefined ? {} : { value: toHex(call.value) }) },
            "pending"
          ],
          signal
        ),
      catch: (cause) =>
        isUnreachable(cause)
          ? new ChainError({ message: `simulate: ${errorText(cause)}`, cause })
          : new CallReverted({ reason: revertReason(cause) })
    }).pipe(Effect.asVoid, Effect.withSpan("ChainClient.simulate"))

  const pendingNonce = (address: Address) =>
    read<Hex>("nonce", "eth_getTransactionCount", [address, "pending"]).pipe(Effect.map(hexToNumber))

  /**
   * Broadcasts a freshly signed transaction once: "sent" (also when the node already has this very
   * transaction), or the refusal a fresh signature may fix (a stale nonce, a stale fee). Any other
   * failure is a `ChainError`, and whether the node took the transaction is then unknown.
   */
  const broadcast = (raw: Hex) =>
    Effect.tryPromise({
      try: (signal) => writes.request<Hash>("eth_sendRawTransaction", [raw], signal),
      catch: (cause) => cause
    }).pipe(
      Effect.as<Broadcast>({ _tag: "Sent" }),
      Effect.catchAll((cause) => {
        const text = errorText(cause)
        if (!isUnreachable(cause)) {
          if (alreadyKnown.test(text)) return Effect.succeed<Broadcast>({ _tag: "Sent" })
          if (staleNonce.test(text)) return Effect.succeed<Broadcast>({ _tag: "Refused", stale: "nonce", text })
          if (lowFee.test(text)) return Effect.succeed<Broadcast>({ _tag: "Refused", stale: "fees", text })
        }
        return Effect.fail(new ChainError({ message: `broadcast: ${text}`, cause }))
      }),
      Effect.tap((sent) => (sent._tag === "Sent" ? watcher().sent : Effect.void))
    )

  /** The call signed by `signer` with `nonce` and `fee`. */
  const signCall = (signer: PrivateKeyAccount, call: Call, gas: bigint, nonce: number, fee: Fees) =>
    chainCall("sign", () =>
      signer.signTransaction({ chainId, nonce, gas, to: call.to, data: call.data, value: call.value, ...fee })
    ).pipe(Effect.map((raw): SignedTransaction => ({ sender: signer.address, hash: keccak256(raw), raw, nonce })))

  /**
   * Signs the call with the signer's next nonce on chain, lets `record` persist it, then
   * broadcasts it; a refusal is a `ChainError`. Runs inside the signer's queue, with the call's gas
   * decided. For the accounts that do not keep their nonce: agent wallets move between replicas and
   * the devnet's deployer key is shared with its operators, so their sends read the chain's count.
   */
  const signAndSend = <E, R>(
    signer: PrivateKeyAccount,
    call: Call,
    gas: bigint,
    record: RecordSigned<E, R>,
    purpose: SignedPurpose = "write"
  ) =>
    Effect.gen(function* () {
      const nonce = yield* pendingNonce(signer.address)
      const signed = yield* signCall(signer, call, gas, nonce, yield* fees.current)
      yield* record(signed, purpose)
      yield* watcher().expect(signed.hash, signer.address)
      const sent = yield* broadcast(signed.raw)
      if (sent._tag === "Sent") return signed
      if (sent.stale === "fees") fees.forget()
      return yield* new ChainError({ message: `broadcast refused: ${sent.text}` })
    })

  /**
   * Sends a signed transaction once more; one the node has or has mined already counts as sent.
   * "underpriced": the node wants a higher fee for it now (a fee spike): it waits for its fee bump
   * (`replaceStuck`), it does not stop what sends it.
   */
  const resend = (raw: Hex) =>
    Effect.tryPromise({
      try: (signal) => writes.request<Hash>("eth_sendRawTransaction", [raw], signal),
      catch: (cause) => cause
    }).pipe(
      Effect.as<"sent" | "underpriced">("sent"),
      Effect.catchAll((cause) => {
        const text = errorText(cause)
        if (!isUnreachable(cause)) {
          if (alreadyKnown.test(text) || /nonce too low/i.test(text)) return Effect.succeed("sent" as const)
          if (lowFee.test(text)) return Effect.succeed("underpriced" as const)
        }
        return Effect.fail(new ChainError({ message: `resend: ${text}`, cause }))
      }),
      Effect.tap((sent) => (sent === "sent" ? watcher().sent : Effect.void))
    )

  /** Simulates, signs, records and broadcasts one call from the signer's queue. */
  const send = <E, R>(signer: PrivateKeyAccount, call: Call, record: RecordSigned<E, R>) =>
    queueOf(signer.address).serially(
      Effect.flatMap(simulate(signer.address, call), (gas) =>
        signAndSend(signer, call, withMargin(gas, GAS_MARGIN_ONE), record)
      )
    )

  const rebroadcast = (raw: Hex) => {
    const hash = keccak256(raw)
    return Effect.tryPromise({
      try: (signal) => writes.request<Hash>("eth_sendRawTransaction", [raw], signal),
      catch: (cause) => cause
    }).pipe(
      Effect.as<Rebroadcast>("known"),
      Effect.catchAll((cause) => {
        const text = errorText(cause)
        const unknownTo = isUnreachable(cause) || !(alreadyKnown.test(text) || /nonce too low/i.test(text))
        if (unknownTo) {
          // A node that answered "underpriced" is up: the fee spike is the chain's, not an outage.
          return !isUnreachable(cause) && lowFee.test(text)
            ? Effect.succeed<Rebroadcast>("underpriced")
            : Effect.fail(new ChainError({ message: `rebroadcast: ${text}`, cause }))
        }
        // The node's word alone does not say that it has this transaction: its hash does.
        return read<unknown>("rebroadcast", "eth_getTransactionByHash", [hash]).pipe(
          Effect.flatMap((known) =>
            known !== null
              ? Effect.succeed<Rebroadcast>("known")
              : alreadyKnown.test(text)
                ? Effect.fail(new ChainError({ message: `rebroadcast: "${text}", yet ${hash} is unknown` }))
                : Effect.succeed<Rebroadcast>("replaced")
          )
        )
      }),
      Effect.withSpan("ChainClient.rebroadcast", { attributes: { "chain.tx": hash } })
    )
  }

  /**
   * A transaction not mined `relayerFees.stuckAfter` after `signedAt`, signed again by `signer` at
   * its nonce with the same call and gas and fees raised within MAX_FEE_PER_GAS (at most
   * `relayerFees.maxBumps` times); not sent. None when it is not due or no raise is left.
   */
  const replacement = (
    signer: PrivateKeyAccount,
    stuck: { readonly raw: Hex; readonly signedAt: Date; readonly bumps: number },
    relayerFees: RelayerFees
  ) =>
    Effect.gen(function* () {
      const waited = Date.now() - stuck.signedAt.getTime()
      if (stuck.bumps >= relayerFees.maxBumps || waited < Duration.toMillis(relayerFees.stuckAfter)) {
        return Option.none<SignedTransaction>()
      }
      const tx = parseTransaction(stuck.raw)
      if (tx.nonce === undefined || tx.gas === undefined) return Option.none<SignedTransaction>()
      // The estimate now, not a cached one: the fee that left the transaction behind may be just that.
      fees.forget()
      const raised = bumpedFees(feesOf(tx), yield* fees.estimated, relayerFees.maxFeePerGas)
      if (Option.isNone(raised)) return Option.none<SignedTransaction>()
      const raw = yield* chainCall("sign", () =>
        signer.signTransaction({
          chainId,
          nonce: tx.nonce!,
          gas: tx.gas!,
          to: tx.to ?? null,
          data: tx.data,
          value: tx.value,
          ...raised.value
        })
      )
      return Option.some<SignedTransaction>({ sender: signer.address, hash: keccak256(raw), raw, nonce: tx.nonce })
    })

  return {
    simulate,
    callAtPending,
    pendingNonce,
    broadcast,
    resend,
    signCall,
    signAndSend,
    send,
    rebroadcast,
    replacement
  }
}

export type Transactions = ReturnType<typeof transactions>
