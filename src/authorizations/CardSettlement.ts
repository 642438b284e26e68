/**
 * The money behind the card (docs/cards.md, "The money behind the card"): every clearing the network
 * sends becomes one `transferFrom(card wallet → settlement account)` under the holder's spending
 * allowance, every refund one `transfer` back, each exactly once, from any number of replicas.
 *
 * Each tick (CARD_SETTLEMENT_POLL), on every replica:
 * - follow: the transfers not final are checked against the settlement account's mined count and
 *   their receipts: mined (final once CHAIN_CONFIRMATIONS deep), mined reverted (a debit is then
 *   owed), a block gone in a reorg (the same bytes sent again), stuck (a fee bump at the same
 *   nonce), overdue (every recorded transaction from the chain's count sent again, in nonce order),
 *   or their nonce taken by another transaction (forgotten: the event is due again);
 * - settle: a mined transfer whose block the balance follower has read settles its clearing or
 *   refund (the statement item `settled` with its hash, a `money` event), in one statement;
 * - send: the clearings and refunds still due are judged on the wallets' balances and allowances read
 *   at once (less what is on its way): a debit they cover is sent, one they do not is owed (the card
 *   frozen, a `money` event); a refund is sent when the settlement account holds it. The sends take
 *   their nonces and are recorded under one lock (`ProgramSender`) and are broadcast after it.
 *
 * Exactly once is the database's: one transfer per event (its key), nonces given under the sender
 * row's lock, every transaction recorded before it is broadcast and only ever sent again as recorded.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Effect, Option } from "effect"
import type { Hash } from "viem"
import { CardProgram } from "../cards/CardProgram.js"
import { broadcastTaken, type ProgramCall, ProgramSender } from "../cards/ProgramSender.js"
import type { Address } from "../chain/Address.js"
import {
  ChainClient,
  chainConfirmations,
  isFinal,
  type Receipt,
  type Usd1Call,
  withinChainTimeout
} from "../chain/ChainClient.js"
import { backgroundLoop } from "../lifecycle/BackgroundLoop.js"
import { countCardTransfer } from "../observability/Metrics.js"
import { AppConfig, durationConfig } from "../runtime/Config.js"
import { transactionally } from "../storage/Sql.js"
import { CardMoney } from "./Api.js"
import { AuthorizationEvents } from "./AuthorizationEvents.js"
import { CardSettlementRepo, type DueRow, type MovedRow, type OpenRow } from "./CardSettlementRepo.js"

/** Clearings and refunds judged and sent per tick, and transfers followed per tick. */
const BATCH = 100
const FOLLOWED = 500
/** Receipts read at once by a tick. */
const RECEIPT_READS = 16

/**
 * A transfer not mined this long after it was signed, and not bumped, makes the follower send every
 * recorded transaction from the chain's count again: one recorded and never broadcast (a crash
 * between the two) holds every later nonce.
 */
const RESEND_AFTER_MS = 10_000

const pollSetting = durationConfig("CARD_SETTLEMENT_POLL", "1 second")

export class CardSettlement extends Effect.Service<CardSettlement>()("app/CardSettlement", {
  effect: Effect.gen(function* () {
    const repo = yield* CardSettlementRepo
    const inTransaction = transactionally(yield* SqlClient.SqlClient)
    const sender = yield* ProgramSender
    const program = yield* CardProgram
    const chain = yield* ChainClient
    const events = yield* AuthorizationEvents
    const bounded = withinChainTimeout((yield* AppConfig).chainTimeout)
    const confirmations = yield* chainConfirmations(chain)
    const atomicPerMicro = 10n ** BigInt(Math.max(0, chain.usd1.decimals - 6))
    const now = Effect.map(Clock.currentTimeMillis, (ms) => new Date(ms))

    const usd = (micros: bigint) => Number(micros) / 1_000_000

    /** Each row's holder is told how the card's money changed. */
    const tell = (change: CardMoney["change"], rows: ReadonlyArray<MovedRow>) =>
      events.moneyMoved(
        rows.map((row) => ({
          address: row.address,
          money: new CardMoney({
            change,
            amountUsd: usd(row.amountMicros),
            authorizationId: row.authorizationId,
            eventId: row.eventId,
            tx: row.tx,
            owedUsd: usd(row.owedMicros)
          })
        }))
      )

    const owe = (ids: ReadonlyArray<string>, at: Date) =>
      ids.length === 0
        ? Effect.void
        : Effect.gen(function* () {
            const owed = yield* repo.owe({ ids, at })
            yield* tell("owed", owed)
            if (owed.length > 0) {
              yield* Effect.logWarning(
                `${owed.length} clearing(s) could not be debited (the wallet or its allowance fell short): owed, the card frozen`
              ).pipe(Effect.annotateLogs("card.events", owed.map((row) => row.eventId).join(",")))
            }
          })

    /** The gas of a kind of call, estimated on its first call and kept (the token's transfers cost alike). */
    const gasKnown = new Map<Usd1Call["_tag"], bigint>()
    const gasOf = (call: Usd1Call) => {
      const known = gasKnown.get(call._tag)
      return known !== undefined
        ? Effect.succeed(known)
        : Effect.tap(bounded(program.estimate(call)), (gas) => Effect.sync(() => gasKnown.set(call._tag, gas)))
    }

    const callOf = (row: DueRow): Usd1Call =>
      row.kind === "clearing"
        ? { _tag: "TransferFrom", from: row.address, to: program.address, amount: row.amountMicros * atomicPerMicro }
        : { _tag: "Transfer", to: row.address, amount: row.amountMicros * atomicPerMicro }

    /**
     * The clearings and refunds due, judged on what the chain says now (less what is on its way from
     * earlier ticks and earlier rows): a debit the wallet's balance and allowance cover is sent, one
     * they do not is owed; a refund is sent when the settlement account holds it, else it waits.
     */
    const sendDue = Effect.gen(function* () {
      const due = yield* repo.due({ limit: BATCH, ids: null })
      if (due.length === 0) return
      const wallets = [...new Set(due.filter((row) => row.kind === "clearing").map((row) => row.address))]
      const [positions, programUsd1, inFlight] = yield* Effect.all(
        [
          bounded(chain.usd1Positions(wallets, program.address)),
          due.some((row) => row.kind === "refund")
            ? bounded(chain.balanceOf(chain.usd1.address, program.address))
            : Effect.succeed(0n),
          repo.inFlight()
        ],
        { concurrency: "unbounded" }
      )
      const left = new Map(wallets.map((wallet, i) => [wallet, { ...positions[i]! }]))
      let programLeft = programUsd1
      for (const sent of inFlight) {
        const funds = left.get(sent.wallet)
        if (sent.kind === "refund") programLeft -= sent.amount
        else if (funds !== undefined) {
          funds.usd1 -= sent.amount
          funds.allowance -= sent.amount
        }
      }
      const sends: Array<ProgramCall<DueRow>> = []
      const owed: Array<string> = []
      let refundsWaiting = 0
      for (const row of due) {
        const amount = row.amountMicros * atomicPerMicro
        if (row.kind === "refund") {
          if (amount > programLeft) {
            refundsWaiting++
            continue
          }
          programLeft -= amount
          sends.push({ item: row, call: callOf(row), gas: 0n })
          continue
        }
        const funds = left.get(row.address)!
        if (amount === 0n || amount > funds.usd1 || amount > funds.allowance) {
          owed.push(row.id)
          continue
        }
        funds.usd1 -= amount
        funds.allowance -= amount
        sends.push({ item: row, call: callOf(row), gas: 0n })
      }
      const priced = yield* Effect.forEach(sends, (send) =>
        Effect.map(gasOf(send.call), (gas) => ({ ...send, gas }))
      ).pipe(
        // A call the token refuses although the reads said it could go: the chain moved since; next tick.
        Effect.catchTag("CallReverted", (refused) =>
          Effect.as(
            Effect.logInfo(`a card transfer was refused in simulation (${refused.reason}): judged again next tick`),
            []
          )
        )
      )
      const at = yield* now
      const sent = yield* sender.sendAll(
        // Under the nonce lock: only what no other replica sent or owed meanwhile.
        Effect.gen(function* () {
          const ids = [...owed, ...priced.map((send) => send.item.id)]
          if (ids.length === 0) return []
          const still = new Set((yield* repo.due({ limit: ids.length, ids })).map((row) => row.id))
          yield* owe(
            owed.filter((id) => still.has(id)),
            at
          )
          return priced.filter((send) => still.has(send.item.id))
        }),
        (recorded) =>
          repo.recordTransfers(
            recorded.map(({ item, signed }) => ({
              eventId: item.id,
              kind: item.kind === "clearing" ? "debit" : "refund",
              cardId: item.cardId,
              wallet: item.address,
              amount: item.amountMicros * atomicPerMicro,
              signed
            })),
            at
          )
      )
      for (const { item } of sent) yield* countCardTransfer(item.kind === "clearing" ? "debit" : "refund", "sent")
      const untaken = sent.filter((send) => !broadcastTaken(send.broadcast)).length
      if (untaken > 0) {
        yield* Effect.logWarning(`${untaken} card transfer(s) recorded and not confirmed sent: followed, sent again`)
      }
      if (refundsWaiting > 0) {
        yield* Effect.logWarning(
          `${refundsWaiting} refund(s) wait: the settlement account ${program.address} holds less USD1 than they need`
        )
      }
    })

    /** The first receipt of any version of the transfer (its fee bumps), none when no version is mined. */
    const receiptOf = (transfer: OpenRow) =>
      Effect.map(
        Effect.forEach([transfer.hash, ...transfer.earlierHashes], (hash) => bounded(chain.receipt(hash as Hash, 0)), {
          concurrency: "unbounded"
        }),
        (receipts) => Option.firstSomeOf(receipts)
      )

    const kindOf = (transfer: OpenRow) => (transfer.kind === "debit" ? "debit" : "refund")

    /** A transfer mined reverted moved nothing: a debit's clearing is owed; a refund is due again. */
    const revertedTransfer = (transfer: OpenRow, receipt: Receipt) =>
      Effect.gen(function* () {
        yield* Effect.logWarning(`a card ${kindOf(transfer)} was mined reverted: it moved nothing`).pipe(
          Effect.annotateLogs({ "card.event": transfer.eventId, "tx.hash": receipt.hash })
        )
        yield* countCardTransfer(kindOf(transfer), "reverted")
        if (transfer.kind === "refund") return yield* repo.forget(transfer.eventId)
        yield* repo.reverted(transfer.eventId, receipt.hash, receipt.blockNumber)
        yield* owe([transfer.eventId], yield* now)
      }).pipe(inTransaction)

    /** The settlement account's recorded transactions from the chain's count, sent again as recorded, in nonce order. */
    const resendJournal = (minedCount: number) =>
      Effect.gen(function* () {
        const journal = yield* repo.journalFrom({ sender: program.address, nonce: minedCount })
        yield* Effect.logWarning(
          `the settlement account's transactions are overdue: ${journal.length} recorded one(s) from nonce ${minedCount} sent again`
        )
        for (const tx of journal) {
          const outcome = yield* Effect.either(bounded(chain.rebroadcast(tx.raw as Hash)))
          if (tx.eventId !== null && outcome._tag === "Right" && outcome.right === "replaced") {
            yield* forgetReplaced(tx.eventId)
          }
        }
      })

    const forgetReplaced = (eventId: string) =>
      Effect.zipRight(
        Effect.logWarning("a card transfer's nonce went to another transaction: it is signed again").pipe(
          Effect.annotateLogs("card.event", eventId)
        ),
        repo.forget(eventId)
      )

    let lastResend = 0

    /** Every transfer not final, checked on chain. */
    const follow = Effect.gen(function* () {
      const open = yield* repo.open(FOLLOWED)
      if (open.length === 0) return
      const [minedCount, head] = yield* Effect.all([bounded(program.nonce("latest")), bounded(chain.watchedHead)], {
        concurrency: "unbounded"
      })
      const at = yield* now
      // The receipts of those the chain's count passed, read side by side (a tick over a remote node
      // would otherwise wait one round trip per transfer).
      const passed = open.filter((transfer) => transfer.nonce < minedCount)
      const receipts = new Map(
        yield* Effect.forEach(
          passed,
          (transfer) => Effect.map(receiptOf(transfer), (r) => [transfer.eventId, r] as const),
          {
            concurrency: RECEIPT_READS
          }
        )
      )
      let overdue = false
      for (const transfer of open) {
        if (transfer.nonce >= minedCount) {
          if (transfer.state === "mined") {
            // Its block went away (a reorg, a node restored from an older state): the same bytes again.
            yield* repo.unmined(transfer.eventId)
            yield* Effect.either(bounded(chain.rebroadcast(transfer.raw as Hash)))
            yield* countCardTransfer(kindOf(transfer), "resent")
            yield* Effect.logWarning(
              `a card ${kindOf(transfer)}'s block went away: its transaction was sent again`
            ).pipe(Effect.annotateLogs({ "card.event": transfer.eventId, "tx.hash": transfer.hash }))
            continue
          }
          const bump = yield* bounded(
            program.bump({ raw: transfer.raw as Hash, signedAt: transfer.signedAt, bumps: transfer.bumps })
          )
          if (Option.isSome(bump)) {
            yield* repo.bumped(transfer.eventId, bump.value, at)
            yield* Effect.either(bounded(chain.rebroadcast(bump.value.raw)))
            yield* countCardTransfer(kindOf(transfer), "bumped")
          } else if (at.getTime() - transfer.signedAt.getTime() > RESEND_AFTER_MS) {
            overdue = true
          }
          continue
        }
        const receipt = receipts.get(transfer.eventId)!
        if (Option.isNone(receipt)) {
          // Its nonce is mined, by none of its versions: another transaction took it.
          if (transfer.state === "sent") yield* forgetReplaced(transfer.eventId)
          else yield* repo.unmined(transfer.eventId)
          continue
        }
        const mined = receipt.value
        if (mined.status === "reverted") {
          yield* revertedTransfer(transfer, mined)
          continue
        }
        const final = isFinal(mined.blockNumber, head.number, confirmations)
        if (
          transfer.state === "sent" ||
          transfer.block !== mined.blockNumber ||
          transfer.minedHash !== mined.hash ||
          final
        ) {
          yield* repo.mined(transfer.eventId, mined.hash, mined.blockNumber, final)
          if (transfer.state === "sent") yield* countCardTransfer(kindOf(transfer), "mined")
        }
      }
      if (overdue && at.getTime() - lastResend > RESEND_AFTER_MS) {
        lastResend = at.getTime()
        yield* resendJournal(minedCount)
      }
    })

    /** Mined transfers whose block the balance follower has read settle their clearings and refunds. */
    const settle = Effect.gen(function* () {
      const moved = yield* repo.settle(yield* now)
      yield* tell(
        "debited",
        moved.filter((row) => row.kind === "clearing")
      )
      yield* tell(
        "credited",
        moved.filter((row) => row.kind === "refund")
      )
    }).pipe(inTransaction)

    const tick = Effect.all([follow, settle, sendDue], { discard: true }).pipe(Effect.withSpan("CardSettlement.tick"))

    return { tick, address: program.address as Address }
  }),
  dependencies: [CardSettlementRepo.Default]
}) {}

export const CardSettlementLive = backgroundLoop(
  "card-settlement",
  Effect.gen(function* () {
    const { tick } = yield* CardSettlement
    return { tick, every: yield* pollSetting }
  })
)
