/**
 * The reconciliation's rules, pure: a world the settlement engine left consistent (every clearing
 * debited, owed, repaid or pending; refunds credited or pending; transfers in flight or not yet on
 * chain) reconciles with no difference and the right figures, whatever its shape; one thing planted
 * wrong in it (an amount, an owed total, a receipt, the balance, a clearing counted twice, a pending
 * clearing too old) is reported, by kind and ids.
 */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { type Facts, type MinedReceipt, reconcile } from "../../src/cards/Reconciliation.js"

const USD1 = "0x5FbDB2315678afecb367f032d93F642f64180aa3"
const SETTLEMENT = "0x9C4109dfBfdFb22f93bd9057D6C0022262FAa4bB"
const ATOMIC = 10n ** 12n
const START = new Date(Date.UTC(2026, 10, 28, 12))
const HOUR = 3_600_000

type Outcome = "debited" | "final" | "owed" | "repaid" | "pending" | "sent" | "credited" | "refund_pending"

const hex = (n: number, width: number) => `0x${n.toString(16).padStart(width, "0")}`
const wallet = (i: number) => hex(0xa000 + i, 40)
const agentWallet = (i: number) => hex(0xb000 + i, 40)

interface World {
  readonly facts: Facts
  /** Debits sent and not yet seen mined: the chain may have them or not. */
  readonly inFlight: bigint
  readonly counts: Record<"clearings" | "debited" | "owed" | "pending" | "refunds" | "credited", number>
}

/** The facts the engine would leave for these events (card index, outcome, micros). */
const world = (
  steps: ReadonlyArray<readonly [number, Outcome, bigint]>,
  options: { readonly repayFromAgent: boolean; readonly chainTookInFlight: boolean }
): World => {
  const events: Array<Facts["events"][number]> = []
  const transfers: Array<Facts["transfers"][number]> = []
  const owedEntries: Array<Facts["owedEntries"][number]> = []
  const receipts = new Map<string, MinedReceipt | undefined>()
  const owedByCard = new Map<string, bigint>()
  let balance = 0n
  let inFlight = 0n
  const counts = { clearings: 0, debited: 0, owed: 0, pending: 0, refunds: 0, credited: 0 }
  steps.forEach(([card, outcome, micros], i) => {
    const id = `evt-${i}`
    const cardId = `card-${card}`
    const address = wallet(card)
    const createdAt = new Date(START.getTime() + i * 1000)
    const refund = outcome === "credited" || outcome === "refund_pending"
    const money = {
      debited: "debited",
      final: "debited",
      owed: "owed",
      repaid: "repaid",
      pending: "debit_pending",
      sent: "debit_pending",
      credited: "credited",
      refund_pending: "credit_pending"
    }[outcome]
    events.push({ id, kind: refund ? "refund" : "clearing", cardId, address, amountMicros: micros, money, createdAt })
    if (refund) counts.refunds++
    else counts.clearings++
    const amount = micros * ATOMIC
    const tx = hex(i + 1, 64)
    const transfer = (state: "sent" | "mined" | "final") =>
      transfers.push({
        eventId: id,
        kind: refund ? "refund" : "debit",
        cardId,
        wallet: address,
        amount,
        sender: SETTLEMENT,
        state,
        minedHash: state === "sent" ? null : tx,
        block: state === "sent" ? null : BigInt(100 + i),
        createdAt
      })
    const mined = (from: string, to: string) =>
      receipts.set(tx, {
        status: "success",
        blockNumber: BigInt(100 + i),
        transfers: [{ token: USD1, from, to, value: amount }]
      })
    switch (outcome) {
      case "debited":
      case "final":
        transfer(outcome === "final" ? "final" : "mined")
        mined(address, SETTLEMENT)
        balance += amount
        counts.debited++
        break
      case "credited":
        transfer("final")
        mined(SETTLEMENT, address)
        balance -= amount
        counts.credited++
        break
      case "sent":
        transfer("sent")
        inFlight += amount
        if (options.chainTookInFlight) balance += amount
        counts.pending++
        break
      case "pending":
        counts.pending++
        break
      case "refund_pending":
        break
      case "owed":
      case "repaid":
        counts.owed++
        owedEntries.push({ id: `owed-${i}`, cardId, amountMicros: micros, eventId: id, repaymentTx: null })
        owedByCard.set(cardId, (owedByCard.get(cardId) ?? 0n) + micros)
        if (outcome === "repaid") {
          const repayment = hex(0x10000 + i, 64)
          owedEntries.push({ id: `repaid-${i}`, cardId, amountMicros: -micros, eventId: null, repaymentTx: repayment })
          owedByCard.set(cardId, owedByCard.get(cardId)! - micros)
          receipts.set(repayment, {
            status: "success",
            blockNumber: BigInt(200 + i),
            transfers: [
              { token: USD1, from: options.repayFromAgent ? agentWallet(card) : address, to: SETTLEMENT, value: amount }
            ]
          })
          balance += amount
        }
    }
  })
  // A refund before any debit would take the account below zero: the program's own money covers it.
  const cards = [...new Set(steps.map(([card]) => card))]
    .filter((card) => owedEntries.some((entry) => entry.cardId === `card-${card}`))
    .map((card) => ({
      id: `card-${card}`,
      address: wallet(card),
      agentWallet: agentWallet(card),
      owedMicros: owedByCard.get(`card-${card}`) ?? 0n
    }))
  return {
    facts: {
      now: new Date(START.getTime() + steps.length * 1000 + 60_000),
      pendingAfterMs: HOUR,
      settlementAccount: SETTLEMENT,
      usd1: { address: USD1, decimals: 18 },
      events,
      transfers,
      owedEntries,
      cards,
      settlementBalance: balance,
      receipts
    },
    inFlight,
    counts
  }
}

const outcomes: ReadonlyArray<Outcome> = [
  "debited",
  "final",
  "owed",
  "repaid",
  "pending",
  "sent",
  "credited",
  "refund_pending"
]
const step = FastCheck.tuple(
  FastCheck.integer({ min: 0, max: 3 }),
  FastCheck.constantFrom(...outcomes),
  FastCheck.bigInt({ min: 1n, max: 10n ** 10n })
)
const worlds = FastCheck.record({
  steps: FastCheck.array(step, { minLength: 1, maxLength: 30 }),
  repayFromAgent: FastCheck.boolean(),
  chainTookInFlight: FastCheck.boolean()
}).map(({ steps, ...options }) => world(steps, options))

const kinds = (facts: Facts) => reconcile(facts).differences.map((difference) => difference.kind)

describe("the card reconciliation's rules", () => {
  it.prop("a consistent world has no difference, and its figures are counted once each", [worlds], ([w]) => {
    const summary = reconcile(w.facts)
    expect(summary.differences).toEqual([])
    expect(summary.clearings.count).toBe(w.counts.clearings)
    expect(summary.debited.count).toBe(w.counts.debited)
    expect(summary.owed.count).toBe(w.counts.owed)
    expect(summary.pending.count).toBe(w.counts.pending)
    expect(summary.refunds.count).toBe(w.counts.refunds)
    expect(summary.refunds.credited.count).toBe(w.counts.credited)
    expect(summary.debited.count + summary.owed.count + summary.pending.count).toBe(summary.clearings.count)
    const owed = w.facts.cards.reduce((sum, card) => sum + card.owedMicros, 0n)
    expect(summary.owed.outstandingMicros).toBe(Number(owed))
  })

  it.prop(
    "a transfer whose amount differs from its event's is reported, with the receipt and the balance",
    [worlds],
    ([w]) => {
      const mined = w.facts.transfers.find((transfer) => transfer.state !== "sent")
      if (mined === undefined) return
      const planted = {
        ...w.facts,
        transfers: w.facts.transfers.map((transfer) =>
          transfer === mined ? { ...transfer, amount: transfer.amount + ATOMIC } : transfer
        )
      }
      const differences = reconcile(planted).differences
      expect(differences).toContainEqual(
        expect.objectContaining({ kind: "transfer_amount_mismatch", eventId: mined.eventId, cardId: mined.cardId })
      )
      expect(differences).toContainEqual(
        expect.objectContaining({ kind: "transfer_receipt_mismatch", eventId: mined.eventId, tx: mined.minedHash })
      )
      if (w.inFlight === 0n) expect(differences.map((d) => d.kind)).toContain("settlement_balance_mismatch")
    }
  )

  it.prop("a card's owed total that is not the sum of its entries is reported", [worlds], ([w]) => {
    const card = w.facts.cards[0]
    if (card === undefined) return
    const planted = {
      ...w.facts,
      cards: w.facts.cards.map((c) => (c === card ? { ...c, owedMicros: c.owedMicros + 1n } : c))
    }
    expect(reconcile(planted).differences).toContainEqual({
      kind: "owed_total_mismatch",
      cardId: card.id,
      expected: String(card.owedMicros),
      actual: String(card.owedMicros + 1n)
    })
  })

  it.prop("a final transfer or a repayment the chain does not have is reported", [worlds], ([w]) => {
    const gone = [
      ...w.facts.transfers.filter((t) => t.state === "final").map((t) => t.minedHash!),
      ...w.facts.owedEntries.flatMap((e) => (e.repaymentTx === null ? [] : [e.repaymentTx]))
    ][0]
    if (gone === undefined) return
    const receipts = new Map(w.facts.receipts)
    receipts.set(gone, undefined)
    const differences = reconcile({ ...w.facts, receipts }).differences
    expect(differences.filter((d) => d.tx === gone).map((d) => d.kind)).toEqual([
      expect.stringMatching(/^(transfer|repayment)_not_on_chain$/)
    ])
  })

  it.prop("a balance beyond what the transfers in flight explain is reported", [worlds], ([w]) => {
    const above = reconcile({ ...w.facts, settlementBalance: w.facts.settlementBalance + w.inFlight + 1n })
    expect(above.differences.map((d) => d.kind)).toEqual(["settlement_balance_mismatch"])
    const below = reconcile({ ...w.facts, settlementBalance: w.facts.settlementBalance - w.inFlight - 1n })
    expect(below.differences.map((d) => d.kind)).toEqual(["settlement_balance_mismatch"])
  })

  it.prop("a debited clearing also owed is counted twice", [worlds], ([w]) => {
    const debited = w.facts.events.find((event) => event.money === "debited")
    if (debited === undefined) return
    const planted = {
      ...w.facts,
      owedEntries: [
        ...w.facts.owedEntries,
        {
          id: "planted",
          cardId: debited.cardId,
          amountMicros: debited.amountMicros,
          eventId: debited.id,
          repaymentTx: null
        }
      ]
    }
    expect(kinds(planted)).toContain("clearing_counted_twice")
  })

  it.prop("pending is no difference until the threshold, then each pending clearing and refund is", [worlds], ([w]) => {
    const later = reconcile({ ...w.facts, now: new Date(w.facts.now.getTime() + HOUR) })
    const pending = w.facts.events.filter((e) => e.money === "debit_pending").map((e) => e.id)
    const refunds = w.facts.events.filter((e) => e.money === "credit_pending").map((e) => e.id)
    expect(later.differences.filter((d) => d.kind === "clearing_pending_too_long").map((d) => d.eventId)).toEqual(
      pending
    )
    expect(later.differences.filter((d) => d.kind === "refund_pending_too_long").map((d) => d.eventId)).toEqual(refunds)
  })

  it("a receipt with another Transfer beside its own, or from another wallet, is not the transfer", () => {
    const w = world(
      [
        [0, "final", 5_000_000n],
        [1, "repaid", 2_000_000n]
      ],
      {
        repayFromAgent: false,
        chainTookInFlight: false
      }
    )
    const [debit] = w.facts.transfers
    const repayment = w.facts.owedEntries.find((e) => e.repaymentTx !== null)!.repaymentTx!
    const receipts = new Map(w.facts.receipts)
    const own = receipts.get(debit!.minedHash!)!
    receipts.set(debit!.minedHash!, {
      ...own,
      transfers: [...own.transfers, { token: USD1, from: wallet(0), to: wallet(9), value: 1n }]
    })
    const repaid = receipts.get(repayment)!
    receipts.set(repayment, { ...repaid, transfers: [{ ...repaid.transfers[0]!, from: wallet(9) }] })
    expect(kinds({ ...w.facts, receipts }).sort()).toEqual(["repayment_receipt_mismatch", "transfer_receipt_mismatch"])
  })

  it("a final transfer mined in another block than recorded, or reverted, is reported", () => {
    const w = world([[0, "final", 5_000_000n]], { repayFromAgent: false, chainTookInFlight: false })
    const hash = w.facts.transfers[0]!.minedHash!
    const receipt = w.facts.receipts.get(hash)!
    const moved = new Map([[hash, { ...receipt, blockNumber: receipt.blockNumber + 1n }]])
    expect(kinds({ ...w.facts, receipts: moved })).toEqual(["transfer_block_mismatch"])
    const reverted = new Map([[hash, { ...receipt, status: "reverted" as const, transfers: [] }]])
    expect(kinds({ ...w.facts, receipts: reverted })).toEqual([
      "transfer_reverted",
      "clearing_not_debited",
      "settlement_balance_mismatch"
    ])
  })
})
