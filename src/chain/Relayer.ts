/**
 * The relayer: the service's keys that send the payers' `transferWithAuthorization`s. Pipelined
 * sends (nonces kept between sends, RELAYER_MAX_IN_FLIGHT under way at once per key), the key
 * rotation by gas, the transactions that wait while the base fee is above MAX_FEE_PER_GAS, the nonce
 * gaps closed from the journal, fee bumps of stuck transactions, and the alarms that tell the
 * merchant's tracker to check the nonce now.
 *
 * One unit because these share one closure's state (each key's gas watch, open nonce gaps and
 * queued sends, the rotation, the transfer's gas): a send, a gap's close and a fee bump each read
 * and change what the others keep; apart, each would reach into the others'.
 */
import { Deferred, Duration, Effect, Exit, Option, Queue, Redacted, Schedule } from "effect"
import { formatGwei, type Hex, hexToBigInt, hexToNumber, isAddressEqual, keccak256, type PrivateKeyAccount } from "viem"
import {
  countNonceGap,
  countRevertedRelayerTransaction,
  relayerGasMetrics,
  setBaseFeeAboveCap
} from "../observability/Metrics.js"
import type { Address } from "./Address.js"
import type { BlockHead, RawReceipt } from "./BlockWatcher.js"
import { transferCall } from "./Calldata.js"
import {
  ChainError,
  type NonceCheck,
  type RecordSigned,
  type Resendable,
  type SignedTransaction,
  type TransferAuthorization
} from "./ChainClient.js"
import type { Deployment } from "./Deployment.js"
import type { Fees } from "./FeeBump.js"
import { maxFeeOf } from "./FeeEstimate.js"
import { isUnreachable } from "./JsonRpc.js"
import { chainCall } from "./NodeErrors.js"
import { signingAccount } from "./Secp256k1.js"
import {
  type Call,
  GAS_MARGIN_ONE,
  GAS_MARGIN_REUSED,
  type SendingParts,
  type Transactions,
  withMargin
} from "./Transactions.js"
import { wallClockPause } from "./WallClock.js"

/** How soon a failed close of a relayer nonce gap is tried again. */
const CLOSE_RETRY_MS = 2_000

/** Reverted transactions remembered so that each is said once: far more than a relayer should ever see. */
const REVERTS_REMEMBERED = 1_000

/** The relayer's transfer gas before it was first estimated: above what `transferWithAuthorization` takes. */
const TRANSFER_GAS_GUESS = 120_000n

export interface RelayerOptions extends SendingParts {
  readonly deployment: Deployment
  readonly transactions: Transactions
}

export const relayer = ({ deployment, read, fees, transactions, queueOf, watcher }: RelayerOptions) =>
  Effect.gen(function* () {
    const { chainId, usd1, relayerFees } = deployment
    const { callAtPending, pendingNonce, broadcast, resend, signCall, simulate, replacement } = transactions
    const relayers = deployment.relayerKeys.map((key) => signingAccount(Redacted.value(key)))

    /** The relayer's (v, r, s) transfer gas: estimated once, reused with a margin; forgotten after an out-of-gas revert. */
    let transferGas: bigint | undefined

    /**
     * Each relayer key's gas watch: its balance read every RELAYER_BALANCE_INTERVAL, each transaction
     * it signs since counted against it at its worst cost (gas limit × max fee), so that asking
     * whether it can pay the next one costs no call. A key that no longer can leaves the rotation
     * (one WARN line), and comes back when it can again (one INFO line); the `relayer_gas_funded`
     * gauge follows, per key.
     */
    interface GasWatch {
      readonly account: PrivateKeyAccount
      readonly metrics: ReturnType<typeof relayerGasMetrics>
      balance: bigint | undefined
      funded: boolean
    }
    const gasWatches: ReadonlyArray<GasWatch> = relayers.map((account) => ({
      account,
      metrics: relayerGasMetrics(account.address),
      balance: undefined,
      funded: true
    }))
    const watchOf = (address: Address) => gasWatches.find((watch) => isAddressEqual(watch.account.address, address))!
    const judgeGas = (watch: GasWatch, balance: bigint) =>
      Effect.gen(function* () {
        watch.balance = balance
        watch.metrics.balance(balance)
        const needed = (transferGas ?? TRANSFER_GAS_GUESS) * maxFeeOf(yield* fees.current)
        const funded = balance >= needed
        watch.metrics.funded(funded)
        if (funded === watch.funded) return
        watch.funded = funded
        const inRotation = gasWatches.filter((other) => other.funded).length
        yield* (
          funded
            ? Effect.logInfo(`relayer key funded again: back in the rotation (${inRotation} of ${relayers.length})`)
            : Effect.logWarning(
                inRotation === 0
                  ? "relayer cannot pay gas for its next transaction: no key left, new payments answer 503 RELAYER_UNFUNDED until one is funded"
                  : `relayer cannot pay gas for its next transaction: the key leaves the rotation (${inRotation} of ${relayers.length} left)`
              )
        ).pipe(
          Effect.annotateLogs({
            "chain.relayer": watch.account.address,
            "relayer.balanceWei": String(balance),
            "relayer.neededWei": String(needed)
          })
        )
      })
    const readGas = (watch: GasWatch) =>
      read<Hex>("relayer balance", "eth_getBalance", [watch.account.address, "latest"]).pipe(
        Effect.flatMap((balance) => judgeGas(watch, hexToBigInt(balance))),
        // the last reading stands until a read answers
        Effect.catchTag("ChainError", () => Effect.void)
      )
    /** A transaction signed with `gas` and `fee` was sent: its worst cost is no longer there to spend. */
    const spentGas = (watch: GasWatch, gas: bigint, fee: Fees) =>
      Effect.suspend(() =>
        watch.balance === undefined ? Effect.void : judgeGas(watch, watch.balance - gas * maxFeeOf(fee))
      ).pipe(Effect.catchTag("ChainError", () => Effect.void))
    /** The keys that can pay gas (all of them when none can: the send will tell). */
    const keysInRotation = () => {
      const funded = gasWatches.filter((watch) => watch.funded)
      return funded.length > 0 ? funded : gasWatches
    }
    let rotation = 0
    /** The next relayer key in turn among those that can pay gas, those with a free slot first (`slotsFull`). */
    const nextRelayer = Effect.sync(() => {
      const funded = keysInRotation()
      const open = funded.filter((watch) => !slotsFull(watch.account.address))
      const from = open.length > 0 ? open : funded
      return from[rotation++ % from.length]!
    })

    /** Per relayer key, a value made on first use and kept. */
    const perKey = <A>(make: () => A) => {
      const values = new Map<Address, A>()
      return (address: Address) => {
        const known = values.get(address)
        if (known !== undefined) return known
        const fresh = make()
        values.set(address, fresh)
        return fresh
      }
    }

    /**
     * Per relayer key, the nonces whose broadcast is on its way (journaled, not answered yet): the
     * chain does not count them yet, and they are no gap to close (`closeGap`).
     */
    const broadcastsOf = perKey(() => new Set<number>())

    /** A send waiting on its key's queue for a nonce, a signature and its journal entry (`journalWaiting`). */
    interface Waiting {
      readonly call: Call
      readonly gas: bigint
      readonly fee: Fees
      readonly record: (signed: SignedTransaction) => Effect.Effect<void, unknown>
      readonly resendable: Resendable | undefined
      readonly journaled: Deferred.Deferred<SignedTransaction, unknown>
    }
    /** Per relayer key, the sends waiting for its queue, in arrival order. */
    const waitingOf = perKey((): Array<Waiting> => [])

    /**
     * Inside the key's queue, the group commit: every send waiting for the queue takes the next
     * nonce in turn and is signed, and their journal entries are written together (`record`s asked
     * for in one batch: one statement, one commit; OrderRepo's `recordBroadcast`). One round trip to
     * the database orders a whole burst instead of one per send. Each send learns its own fate.
     *
     * A send whose entry was not written (a failed statement: every send of it; a settlement decided
     * meanwhile: that one) never goes out and frees its nonce, as a lone send's failed record does:
     * the next send learns the nonce again from the journal and the chain (`closeGap`). One freed
     * below a journaled send of the batch would hold that send queued on chain: `closeGap` fills it
     * with an empty transaction, and the nonce check is asked for at once (no later send may come).
     */
    const journalWaiting = (relayer: PrivateKeyAccount) =>
      Effect.suspend(() => {
        const batch = waitingOf(relayer.address).splice(0)
        // an earlier batch took this send
        if (batch.length === 0) return Effect.void
        const queue = queueOf(relayer.address)
        const resendable = batch.find((send) => send.resendable !== undefined)?.resendable
        return Effect.gen(function* () {
          const first = yield* queue.nonce(
            resendable === undefined
              ? pendingNonce(relayer.address)
              : Effect.map(closeGap(relayer, resendable), (check) => check.next)
          )
          const signed = yield* Effect.forEach(batch, (send, index) =>
            signCall(relayer, send.call, send.gas, first + index, send.fee)
          )
          const journaled = yield* Effect.forEach(
            batch,
            (send, index) => Effect.exit(Effect.as(send.record(signed[index]!), signed[index]!)),
            { concurrency: "unbounded", batching: true }
          )
          const written = journaled.flatMap((exit) => (Exit.isSuccess(exit) ? [exit.value] : []))
          for (const tx of written) {
            yield* watcher().expect(tx.hash, relayer.address)
            broadcastsOf(relayer.address).add(tx.nonce)
          }
          const last = written.at(-1)
          if (last !== undefined) yield* queue.sent(last.nonce)
          if (written.length < batch.length) {
            // not recorded, not sent: the nonce is free again, and the chain and the journal say where to go on
            yield* queue.forget
            if (last !== undefined && last.nonce - first + 1 > written.length) {
              yield* checkNonceNow(`a journal entry of relayer ${relayer.address}'s batch was not written`)
            }
          }
          return journaled
        }).pipe(
          Effect.exit,
          Effect.flatMap((outcome) =>
            Effect.forEach(
              batch,
              (send, index) =>
                Deferred.done(
                  send.journaled,
                  Exit.isSuccess(outcome) ? outcome.value[index]! : Exit.failCause(outcome.cause)
                ),
              { discard: true }
            )
          ),
          // the batch answers every send in it, whichever send's fiber runs it
          Effect.uninterruptible
        )
      })

    /** The send's transaction given the key's next nonce, signed and journaled, in its queue's next batch. */
    const journaledSend = <E, R>(
      relayer: PrivateKeyAccount,
      call: Call,
      gas: bigint,
      fee: Fees,
      record: RecordSigned<E, R>,
      resendable: Resendable | undefined
    ) =>
      Effect.gen(function* () {
        const context = yield* Effect.context<R>()
        const send: Waiting = {
          call,
          gas,
          fee,
          record: (signed) => Effect.provide(record(signed, "write"), context),
          resendable,
          journaled: yield* Deferred.make<SignedTransaction, unknown>()
        }
        waitingOf(relayer.address).push(send)
        yield* queueOf(relayer.address).serially(journalWaiting(relayer))
        // Its batch ran (this send's or an earlier one): the send's own outcome, with the caller's error type.
        return yield* Deferred.await(send.journaled) as Effect.Effect<SignedTransaction, E | ChainError>
      })

    /**
     * Per relayer key, its RELAYER_MAX_IN_FLIGHT slots: a send holds one from its simulation to the
     * node's answer to its broadcast, or, when its transaction can only wait for its fee (`keepSlot`),
     * until its nonce is mined or the base fee is within MAX_FEE_PER_GAS again (`followBaseFee`). So
     * while the base fee is above the cap a key signs no more than that many transactions.
     */
    const slotsOf = perKey(() => Effect.unsafeMakeSemaphore(relayerFees.maxInFlight))
    /** Per relayer key, the nonces whose transactions wait for their fee, each keeping its slot. */
    const waitingForFeeOf = perKey(() => new Set<number>())
    /** Whether the last head's base fee is above MAX_FEE_PER_GAS: nothing the relayer signs can be mined. */
    let baseFeeAboveCap = false
    yield* setBaseFeeAboveCap(false)
    /** Every slot of the key is kept by a transaction waiting for its fee. */
    const slotsFull = (address: Address) => waitingForFeeOf(address).size >= relayerFees.maxInFlight
    /** The send's slot stays with its transaction, which waits at `nonce` for its fee. */
    const keepSlot = (address: Address, nonce: number) =>
      Effect.sync(() => {
        waitingForFeeOf(address).add(nonce)
        return true
      })

    /**
     * The relayer's send, pipelined: the exact call is run against the pending state first (a
     * revert is `CallReverted`, nothing signed; unless the caller just did, `simulated`), then, in
     * the relayer's queue only for what orders nonces (the nonce, the signature, `record`: no chain
     * round trip while the next nonce is known), the transaction takes the next nonce and is
     * journaled, together with every other send waiting for the queue (`journalWaiting`); its
     * broadcast goes out after the queue is let go, so that the next batch signs while this one
     * travels. Up to RELAYER_MAX_IN_FLIGHT sends of a key are under way at once (its slots).
     *
     * Each send takes the next relayer key in turn among those that can pay gas (RELAYER_PRIVATE_KEYS).
     * A key keeps its next nonce between sends (its keys are this replica's own). A send that fails or
     * whose fate is unknown makes the next send learn it again: from the journal with `resendable`
     * (every recorded transaction above the chain's count sent again, `closeGap`), else from the
     * chain's count. One the node refuses for its fee waits at its nonce (answered as sent: it is
     * journaled, and is sent again or bumped at that nonce), keeping its slot, as does one sent while
     * the base fee is above MAX_FEE_PER_GAS. One the node refuses for a stale nonce is simulated,
     * signed anew (and recorded again: the refused one can never be mined) and broadcast, once.
     */
    const relayerSend = <E, R>(
      call: Call,
      gas: bigint,
      record: RecordSigned<E, R>,
      resendable?: Resendable,
      simulated = false
    ) =>
      Effect.gen(function* () {
        const watch = yield* nextRelayer
        const relayer = watch.account
        const queue = queueOf(relayer.address)
        const forget = queue.serially(queue.forget)
        const slots = slotsOf(relayer.address)
        let slotKept = false
        const send = Effect.gen(function* () {
          for (let attempt = 1; ; attempt++) {
            // A send signed anew after a refusal is simulated again: time passed since the caller's.
            if (!(simulated && attempt === 1)) yield* callAtPending(relayer.address, call)
            const fee = yield* fees.current
            // Not interrupted from its wait for a batch to its broadcast's answer: a batch may journal
            // it any moment, and a journaled transaction counted on its way must be sent (both bounded).
            const [signed, sent] = yield* Effect.uninterruptible(
              Effect.flatMap(journaledSend(relayer, call, gas, fee, record, resendable), (signed) =>
                broadcast(signed.raw).pipe(
                  Effect.tapError(() => forget),
                  Effect.ensuring(Effect.sync(() => broadcastsOf(relayer.address).delete(signed.nonce))),
                  Effect.map((sent) => [signed, sent] as const)
                )
              )
            )
            if (sent._tag === "Sent") {
              yield* spentGas(watch, gas, fee)
              // In the pool of a node that keeps what it cannot mine yet: it waits there for the fee.
              if (baseFeeAboveCap) slotKept = yield* keepSlot(relayer.address, signed.nonce)
              return signed
            }
            if (sent.stale === "fees") {
              // The journaled transaction keeps its nonce and waits: sent again as it is, or replaced
              // at that nonce with the fee the chain asks then, within MAX_FEE_PER_GAS (`replaceStuck`).
              // Signed anew at another nonce, it would leave its own to an empty fill, and could be
              // mined beside its copy once the fee came down.
              fees.forget()
              slotKept = yield* keepSlot(relayer.address, signed.nonce)
              yield* Effect.logWarning(
                `settlement transaction waits at nonce ${signed.nonce}: the node refused its fee (${sent.text})`
              ).pipe(Effect.annotateLogs({ "chain.relayer": relayer.address }))
              return signed
            }
            yield* forget
            if (attempt > 1) return yield* new ChainError({ message: `broadcast refused: ${sent.text}` })
          }
        })
        // The wait for a slot may be interrupted (a settlement's time limit); the slot taken is
        // given back at the end, unless a waiting transaction kept it.
        return yield* Effect.uninterruptibleMask((restore) =>
          restore(slots.take(1)).pipe(
            Effect.zipRight(
              restore(send).pipe(Effect.ensuring(Effect.suspend(() => (slotKept ? Effect.void : slots.release(1)))))
            )
          )
        )
      })

    /**
     * Per relayer key, the gap open now: each nonce sent again or filled since it opened, counted and
     * logged once however many checks find it still open (a check repeats while the node does not count
     * the transactions yet).
     */
    const openGapOf = perKey(() => new Map<number, "resent" | "filled">())

    /** How many of `nonces` were sent again, how many filled. */
    const actionsOf = (nonces: ReadonlyMap<number, "resent" | "filled">) => {
      const all = [...nonces.values()]
      return {
        resent: all.filter((action) => action === "resent").length,
        filled: all.filter((action) => action === "filled").length
      }
    }

    /** "5-7, 9" for the nonces 5, 6, 7 and 9. */
    const nonceRanges = (nonces: ReadonlyArray<number>) => {
      const ranges: Array<string> = []
      const sorted = [...nonces].sort((a, b) => a - b)
      for (let i = 0; i < sorted.length; ) {
        let j = i
        while (j + 1 < sorted.length && sorted[j + 1] === sorted[j]! + 1) j++
        ranges.push(i === j ? `${sorted[i]}` : `${sorted[i]}-${sorted[j]}`)
        i = j + 1
      }
      return ranges.join(", ")
    }

    /**
     * What one check did to the gap of `relayer`: nonces met for the first time are counted
     * (`relayer_nonce_gap_transactions_total`) and, when they open the gap, logged in one WARN; a
     * check that finds nothing to send closes an open gap with one INFO naming all its nonces.
     */
    const noteGap = (
      relayer: Address,
      handled: ReadonlyMap<number, "resent" | "filled">,
      chainNext: number,
      local: number | undefined
    ) =>
      Effect.gen(function* () {
        const gap = openGapOf(relayer)
        if (handled.size === 0) {
          if (gap.size === 0) return
          const { resent, filled } = actionsOf(gap)
          yield* Effect.logInfo(
            `the relayer's nonce gap is closed: nonces ${nonceRanges([...gap.keys()])}; ` +
              `${resent} recorded transaction(s) sent again, ${filled} nonce(s) filled`
          )
          gap.clear()
          return
        }
        const opens = gap.size === 0
        const fresh = new Map([...handled].filter(([nonce]) => !gap.has(nonce)))
        for (const [nonce, action] of fresh) gap.set(nonce, action)
        const { resent, filled } = actionsOf(fresh)
        yield* countNonceGap(resent, filled)
        if (opens) {
          yield* Effect.logWarning(
            `relayer nonce gap: the chain counts ${chainNext}, the relayer was at ${local ?? "(unknown)"}; ` +
              `nonces ${nonceRanges([...fresh.keys()])}: ${resent} recorded transaction(s) sent again, ${filled} nonce(s) filled`
          )
        }
      }).pipe(Effect.annotateLogs({ "chain.relayer": relayer }))

    /**
     * The relayer key's empty transaction for `nonce`: fills a nonce no recorded transaction can take.
     * "underpriced": the node refused its fee (a fee spike), nothing was filled; the next check tries again.
     */
    const fillNonce = (relayer: PrivateKeyAccount, nonce: number) =>
      Effect.gen(function* () {
        const fee = yield* fees.current
        const raw = yield* chainCall("sign", () =>
          relayer.signTransaction({ chainId, nonce, gas: 21_000n, to: relayer.address, value: 0n, ...fee })
        )
        return yield* resend(raw)
      })

    /**
     * Inside the relayer's queue: from the chain's pending count up to the relayer's next nonce (or,
     * when it is not known, past every recorded transaction), each nonce gets its recorded
     * transaction again or an empty one, in order. A node that lost blocks (a reorg, a restart from
     * a snapshot) or a transaction recorded but never broadcast (a crash) then holds nothing back.
     */
    const closeGap = (relayer: PrivateKeyAccount, resendable: Resendable) =>
      Effect.gen(function* () {
        const queue = queueOf(relayer.address)
        const local = yield* queue.known
        // Taken before the chain is asked: a broadcast answered meanwhile may be missing from the
        // count read, yet it is no gap. No nonce joins them while this holds the queue.
        const onItsWay = new Set(broadcastsOf(relayer.address))
        const chainNext = yield* pendingNonce(relayer.address)
        const recorded = yield* resendable(relayer.address, chainNext)
        const next =
          local !== undefined
            ? Math.max(local, chainNext)
            : recorded.reduce((end, tx) => Math.max(end, tx.nonce + 1), chainNext)
        // A batch's broadcasts reach the node in any order: the count stops below one on its way,
        // and the node may hold the recorded ones above it already (sent again at a later check if not).
        const firstOnItsWay = Math.min(...onItsWay)
        const handled = new Map<number, "resent" | "filled">()
        for (let nonce = chainNext; nonce < next; nonce++) {
          if (onItsWay.has(nonce)) continue
          const tx = recorded.find((candidate) => candidate.nonce === nonce)
          if (tx === undefined) {
            // Only a nonce the journal holds nothing sendable for; counted once the node took the fill.
            if ((yield* fillNonce(relayer, nonce).pipe(Effect.tapError(() => queue.forget))) === "sent") {
              handled.set(nonce, "filled")
            }
          } else if (nonce > firstOnItsWay) {
          } else {
            // one the node now finds underpriced is not "sent again": its fee bump sends it (`replaceStuck`)
            if ((yield* resend(tx.raw).pipe(Effect.tapError(() => queue.forget))) === "sent") {
              handled.set(nonce, "resent")
            }
          }
        }
        yield* queue.continueAt(next)
        yield* noteGap(relayer.address, handled, chainNext, local)
        const check: NonceCheck = { chainNext, next, ...actionsOf(handled) }
        return check
      }).pipe(
        Effect.tapBoth({
          // Tried again soon, not at the next tick: a gap left open holds every later payment. A
          // node that did not answer is the chain's outage (/ready and the outage log say so).
          onFailure: (error) =>
            isUnreachable(error.cause)
              ? Effect.void
              : Effect.sync(() => {
                  closeFailure = error.message
                }).pipe(
                  Effect.zipRight(
                    Effect.forkDaemon(
                      wallClockPause(CLOSE_RETRY_MS).pipe(
                        Effect.zipRight(checkNonceNow(`the last nonce gap close failed: ${error.message}`))
                      )
                    )
                  )
                ),
          onSuccess: () =>
            Effect.sync(() => {
              closeFailure = undefined
              queuedSince.delete(relayer.address)
            })
        }),
        Effect.withSpan("ChainClient.closeGap")
      )

    const followRelayerNonce = (resendable: Resendable) =>
      Effect.forEach(relayers, (relayer) => queueOf(relayer.address).serially(closeGap(relayer, resendable)))

    const replaceStuck = <E, R>(
      stuck: { readonly sender: Address; readonly raw: Hex; readonly signedAt: Date; readonly bumps: number },
      record: RecordSigned<E, R>
    ) =>
      Effect.gen(function* () {
        const replaced = yield* replacement(watchOf(stuck.sender).account, stuck, relayerFees)
        if (Option.isNone(replaced)) return replaced
        const signed = replaced.value
        yield* record(signed, "write")
        // Whoever waits for the stuck one gets this one's receipt if it is the one mined.
        yield* watcher().expect(signed.hash, signed.sender, keccak256(stuck.raw))
        // One the node refuses (a fee still too low) stays journaled: it is bumped again when due.
        yield* resend(signed.raw)
        return replaced
      }).pipe(
        queueOf(stuck.sender).serially,
        Effect.withSpan("ChainClient.replaceStuck", { attributes: { "chain.bumps": stuck.bumps } })
      )

    // -----------------------------------------------------------------------------------------------
    // The relayer's nonce checked at once when the chain says it may be off

    /** Why the relayer's nonce must be checked now, for the merchant's tracker (`relayerNonceAlarm`). */
    const nonceAlarms = yield* Queue.sliding<string>(1)
    const checkNonceNow = (why: string) => Effect.asVoid(Queue.offer(nonceAlarms, why))
    /** The last close of a nonce gap failed: why. */
    let closeFailure: string | undefined
    /** Per relayer key, the chain's pending count below its next nonce, with its transactions in flight: since when. */
    const queuedSince = new Map<Address, { readonly at: number; readonly chainNext: number; readonly local: number }>()
    const queuedStuckAfter = deployment.nonceGapStuckAfter

    /**
     * On a new head while relayer transactions are overdue (not in the blocks after their broadcast):
     * a chain counting fewer pending than the relayer's next nonce holds some of them queued (or lost
     * them). Seen on two heads running, the nonce is checked at once. Nothing overdue, nothing read.
     */
    const checkRelayerQueue = Effect.forEach(relayers, ({ address }) =>
      Effect.gen(function* () {
        const local = yield* queueOf(address).known
        // While the base fee is above the cap the chain mines none of them: they wait, no gap.
        if (baseFeeAboveCap || local === undefined || watcher().overdue(address) === 0) {
          queuedSince.delete(address)
          return
        }
        const chainNext = yield* pendingNonce(address)
        if (chainNext >= local) {
          queuedSince.delete(address)
          return
        }
        const before = queuedSince.get(address)
        queuedSince.set(address, { at: before?.at ?? Date.now(), chainNext, local })
        if (before !== undefined) {
          yield* checkNonceNow(
            `the chain counts ${chainNext} pending for relayer ${address}, whose next nonce is ${local}`
          )
        }
      }).pipe(Effect.ignore)
    )

    /** The key's nonces the chain has mined (its count at the latest block). */
    const minedNext = (address: Address) =>
      read<Hex>("mined nonce", "eth_getTransactionCount", [address, "latest"]).pipe(Effect.map(hexToNumber))

    /**
     * On a new head: whether its base fee is above MAX_FEE_PER_GAS (one WARN when it goes above, one
     * INFO when it is back, the `relayer_base_fee_above_cap` gauge), then the slots kept by waiting
     * transactions: given back for the nonces the chain has mined, and every one once the base fee is
     * within the cap, when the key's nonce is checked at once so that they go out.
     */
    const followBaseFee = (head: BlockHead) =>
      Effect.gen(function* () {
        const cap = relayerFees.maxFeePerGas
        const baseFee = head.baseFeePerGas ?? 0n
        const above = Option.exists(cap, (limit) => baseFee > limit)
        if (above !== baseFeeAboveCap) {
          baseFeeAboveCap = above
          yield* setBaseFeeAboveCap(above)
          const baseFeeIs = `the chain's base fee (${formatGwei(baseFee)} gwei) is`
          const capGwei = formatGwei(Option.getOrElse(cap, () => 0n))
          yield* above
            ? Effect.logWarning(
                `${baseFeeIs} above MAX_FEE_PER_GAS (${capGwei} gwei): settlements wait at their nonces, at most ` +
                  `${relayerFees.maxInFlight} a relayer key; beyond, new payments answer 503 RELAYER_PRICED_OUT`
              )
            : Effect.logInfo(
                `${baseFeeIs} within MAX_FEE_PER_GAS (${capGwei} gwei) again: the waiting settlements go out`
              )
        }
        for (const { address } of relayers) {
          const waiting = waitingForFeeOf(address)
          if (waiting.size === 0) continue
          // A count not read now is read at the next head.
          const mined = above ? yield* Effect.option(minedNext(address)) : Option.some(Number.POSITIVE_INFINITY)
          if (Option.isNone(mined)) continue
          const done = [...waiting].filter((nonce) => nonce < mined.value)
          if (done.length === 0) continue
          for (const nonce of done) waiting.delete(nonce)
          yield* slotsOf(address).release(done.length)
          if (!above) {
            yield* checkNonceNow(`relayer ${address}'s ${done.length} transaction(s) waiting for their fee may go out`)
          }
        }
      })

    /** Whether every key in the rotation holds RELAYER_MAX_IN_FLIGHT transactions waiting for the base fee to fall within the cap. */
    const pricedOut = Effect.sync(
      () => baseFeeAboveCap && keysInRotation().every((watch) => slotsFull(watch.account.address))
    )

    const relayerNonceTrouble = Effect.sync((): Option.Option<string> => {
      if (closeFailure !== undefined) return Option.some(`a relayer nonce gap could not be closed: ${closeFailure}`)
      for (const [address, queued] of queuedSince) {
        if (Date.now() - queued.at >= Duration.toMillis(queuedStuckAfter)) {
          return Option.some(
            `relayer nonce gap: the chain counts ${queued.chainNext} pending, relayer ${address}'s next nonce is ` +
              `${queued.local}, for over ${Duration.format(queuedStuckAfter)}`
          )
        }
      }
      return Option.none()
    })

    /** Reverted relayer transactions already said, by hash and block (oldest first). */
    const revertsSaid = new Set<string>()

    /**
     * A receipt read, by whoever reads it (the paying request, the tracker until final, the
     * reconciler): a relayer key's transaction mined reverted is one WARN and one count of
     * `relayer_transactions_reverted_total`, once per block it is mined in, whatever sent it (the
     * first send, a fee bump, a nonce gap's close, a re-send after a reorg).
     */
    const noteReceipt = (receipt: RawReceipt) =>
      Effect.suspend(() => {
        if (receipt.status === "0x1") return Effect.void
        const sender = relayers.find((relayer) => isAddressEqual(relayer.address, receipt.from))
        const said = `${receipt.transactionHash}@${receipt.blockHash}`.toLowerCase()
        if (sender === undefined || revertsSaid.has(said)) return Effect.void
        revertsSaid.add(said)
        if (revertsSaid.size > REVERTS_REMEMBERED) revertsSaid.delete(revertsSaid.values().next().value!)
        return Effect.logWarning(
          `relayer transaction reverted on chain in block ${hexToBigInt(receipt.blockNumber)}: its gas was paid for nothing`
        ).pipe(
          Effect.annotateLogs({ "chain.relayer": sender.address, "tx.hash": receipt.transactionHash }),
          Effect.zipRight(countRevertedRelayerTransaction(sender.address))
        )
      })

    const transferWithAuthorization = <E, R>(
      authorization: TransferAuthorization,
      signature: Hex,
      record: RecordSigned<E, R>,
      resendable?: Resendable,
      simulated = false
    ) => {
      const { vrs, data } = transferCall(authorization, signature)
      const call: Call = { to: usd1.address, data }
      // Its gas: estimated for a contract wallet's signature (it costs what its wallet costs), once
      // for (v, r, s) ones (an EOA's costs the same every time). Whatever the gas, the call is
      // simulated again right before it is signed (`callAtPending`): `transferCheck` ran before the
      // reservation, and the payer's other payments may have spent the balance since.
      const gas = Effect.suspend(() =>
        vrs && transferGas !== undefined
          ? Effect.succeed(transferGas)
          : simulate(relayers[0]!.address, call).pipe(
              Effect.map((estimate) => withMargin(estimate, vrs ? GAS_MARGIN_REUSED : GAS_MARGIN_ONE)),
              Effect.tap((reused) =>
                Effect.sync(() => {
                  if (vrs) transferGas = reused
                })
              )
            )
      )
      // Simulated by the caller: the estimate would be one more simulation (a gas limit not known yet).
      const simulatedAlready = simulated && vrs && transferGas !== undefined
      return Effect.flatMap(gas, (limit) => relayerSend(call, limit, record, resendable, simulatedAlready)).pipe(
        Effect.withSpan("ChainClient.transferWithAuthorization")
      )
    }

    return {
      addresses: relayers.map((relayer) => relayer.address),
      funded: Effect.sync(() => gasWatches.some((watch) => watch.funded)),
      transferWithAuthorization,
      followRelayerNonce,
      replaceStuck,
      nonceAlarm: Queue.take(nonceAlarms),
      nonceTrouble: relayerNonceTrouble,
      checkNonceNow,
      pricedOut,
      noteReceipt,
      /** For the block watcher's new heads. */
      newHead: (head: BlockHead) => Effect.zipRight(followBaseFee(head), checkRelayerQueue),
      /** A transfer reverted out of gas: its gas is estimated anew. */
      forgetTransferGas: () => {
        transferGas = undefined
      },
      /** Each key's balance read every RELAYER_BALANCE_INTERVAL while the scope is open. */
      watchGas: Effect.forEach(gasWatches, readGas, { concurrency: "unbounded" }).pipe(
        Effect.repeat(Schedule.spaced(relayerFees.balanceInterval)),
        Effect.forkScoped
      )
    }
  })
