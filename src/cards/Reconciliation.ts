/**
 * The card program's reconciliation (docs/cards.md, "Reconciliation"), pure: the network's clearings
 * and refunds, the settlement account's transfers, the owed ledger and what the chain says of them
 * in; one summary out, with every difference found. Amounts of events and of the owed ledger are
 * micros (millionths of a dollar), transfers and balances USD1 atomic units.
 *
 * A clearing is accounted for exactly once: debited (its debit transfer mined), owed (its owed
 * entry) and perhaps repaid since, or still pending. Pending is no difference until it is older than
 * `pendingAfterMs`: the settlement engine is working on it. What the engine may be between two writes
 * of (a transfer sent but not yet seen mined, or mined but its event not yet moved on) is pending too,
 * and the settlement account's balance may then be off by those transfers' amounts, no more.
 */

/** A clearing or a refund from the card network (`card_network_events`). */
export interface NetworkEvent {
  readonly id: string
  readonly kind: "clearing" | "refund"
  readonly cardId: string
  readonly address: string
  readonly amountMicros: bigint
  readonly money: string | null
  readonly createdAt: Date
}

/** A transfer of the settlement account (`card_program_transfers`): amounts in atomic units. */
export interface ProgramTransfer {
  readonly eventId: string
  readonly kind: "debit" | "refund"
  readonly cardId: string
  readonly wallet: string
  readonly amount: bigint
  readonly sender: string
  readonly state: "sent" | "mined" | "final"
  readonly minedHash: string | null
  readonly block: bigint | null
  readonly createdAt: Date
}

/** An entry of the owed ledger: +amount for a clearing not debited (its event), −amount for a repayment (its transaction). */
export interface OwedEntry {
  readonly id: string
  readonly cardId: string
  readonly amountMicros: bigint
  readonly eventId: string | null
  readonly repaymentTx: string | null
}

/** A card with money to reconcile: its wallet, its agent's wallet (a repayment may come from either) and what it owes. */
export interface CardOwing {
  readonly id: string
  readonly address: string
  readonly agentWallet: string | null
  readonly owedMicros: bigint
}

/** A USD1 (or any token's) Transfer log of a receipt. */
export interface TransferLog {
  readonly token: string
  readonly from: string
  readonly to: string
  readonly value: bigint
}

/** A mined transaction as the chain answers it now. */
export interface MinedReceipt {
  readonly status: "success" | "reverted"
  readonly blockNumber: bigint
  readonly transfers: ReadonlyArray<TransferLog>
}

export interface Facts {
  readonly now: Date
  readonly pendingAfterMs: number
  readonly settlementAccount: string
  readonly usd1: { readonly address: string; readonly decimals: number }
  readonly events: ReadonlyArray<NetworkEvent>
  readonly transfers: ReadonlyArray<ProgramTransfer>
  readonly owedEntries: ReadonlyArray<OwedEntry>
  readonly cards: ReadonlyArray<CardOwing>
  /** The settlement account's USD1 balance, atomic units. */
  readonly settlementBalance: bigint
  /** Each transaction hash read (mined transfers, repayments; lower case): its receipt, undefined when not mined. */
  readonly receipts: ReadonlyMap<string, MinedReceipt | undefined>
}

/** Every kind of difference, as reported and as the metrics label them. */
export const DIFFERENCE_KINDS = [
  "clearing_pending_too_long",
  "clearing_not_debited",
  "clearing_counted_twice",
  "clearing_money_invalid",
  "refund_pending_too_long",
  "refund_not_credited",
  "refund_money_invalid",
  "transfer_event_mismatch",
  "transfer_amount_mismatch",
  "transfer_wallet_mismatch",
  "transfer_sender_mismatch",
  "transfer_not_on_chain",
  "transfer_reverted",
  "transfer_receipt_mismatch",
  "transfer_block_mismatch",
  "owed_entry_mismatch",
  "owed_not_recorded",
  "owed_total_mismatch",
  "repaid_mismatch",
  "repayment_not_on_chain",
  "repayment_receipt_mismatch",
  "settlement_balance_mismatch"
] as const

export type DifferenceKind = (typeof DIFFERENCE_KINDS)[number]

/** One difference: its kind, the ids involved, and what was expected against what was found. */
export interface Difference {
  readonly kind: DifferenceKind
  readonly eventId?: string
  readonly cardId?: string
  readonly tx?: string
  readonly expected?: string
  readonly actual?: string
}

export interface Figure {
  readonly count: number
  readonly micros: number
}

export interface Summary {
  /** Every clearing the network sent. */
  readonly clearings: Figure
  /** Clearings whose debit is on chain. */
  readonly debited: Figure
  /** Clearings that could not be debited (owed, repaid or not), and what the cards still owe. */
  readonly owed: Figure & { readonly repaidMicros: number; readonly outstandingMicros: number }
  /** Clearings not yet debited nor owed (within the threshold, or reported below). */
  readonly pending: Figure
  /** Refunds, and those sent back to the card wallet. */
  readonly refunds: Figure & { readonly credited: Figure }
  /** The settlement account's USD1: on chain, and what the transfers and repayments explain. */
  readonly settlementAccount: { readonly address: string; readonly balance: string; readonly expected: string }
  readonly differences: ReadonlyArray<Difference>
}

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase()

const figure = (amounts: ReadonlyArray<bigint>): Figure => ({
  count: amounts.length,
  micros: Number(amounts.reduce((sum, amount) => sum + amount, 0n))
})

const describeLogs = (logs: ReadonlyArray<TransferLog>) =>
  logs.length === 0 ? "no Transfer" : logs.map((log) => `${log.token}:${log.from}->${log.to}:${log.value}`).join(", ")

/** Whether the receipt's Transfer logs are exactly the one expected. */
const exactly = (receipt: MinedReceipt, expected: TransferLog) => {
  const [log, ...others] = receipt.transfers
  return (
    log !== undefined &&
    others.length === 0 &&
    same(log.token, expected.token) &&
    same(log.from, expected.from) &&
    same(log.to, expected.to) &&
    log.value === expected.value
  )
}

/** The reconciliation of the facts: pure, total, in the order the facts are given. */
export const reconcile = (facts: Facts): Summary => {
  const differences: Array<Difference> = []
  const atomicPerMicro = 10n ** BigInt(Math.max(0, facts.usd1.decimals - 6))
  const settlement = facts.settlementAccount
  const isOld = (at: Date) => facts.now.getTime() - at.getTime() > facts.pendingAfterMs
  const eventsById = new Map(facts.events.map((event) => [event.id, event]))
  const transferOf = new Map(facts.transfers.map((transfer) => [transfer.eventId, transfer]))
  const owedOf = new Map(
    facts.owedEntries.flatMap((entry) => (entry.eventId === null ? [] : [[entry.eventId, entry] as const]))
  )
  const cardsById = new Map(facts.cards.map((card) => [card.id, card]))

  // The transfers: each against its event and its receipt. "Sure" is on chain as recorded, "open"
  // is what the engine may be between writes of (sent, or mined and not read back now).
  let sure = 0n
  let openIn = 0n
  let openOut = 0n
  const onChain = new Set<string>()
  for (const transfer of facts.transfers) {
    const event = eventsById.get(transfer.eventId)
    const ids = { eventId: transfer.eventId, cardId: transfer.cardId }
    const wanted = transfer.kind === "debit" ? "clearing" : "refund"
    if (event === undefined || event.kind !== wanted || event.cardId !== transfer.cardId) {
      differences.push({
        kind: "transfer_event_mismatch",
        ...ids,
        expected: `a ${wanted} of card ${transfer.cardId}`,
        actual: event === undefined ? "no clearing or refund" : `a ${event.kind} of card ${event.cardId}`
      })
    } else {
      if (transfer.amount !== event.amountMicros * atomicPerMicro) {
        differences.push({
          kind: "transfer_amount_mismatch",
          ...ids,
          expected: String(event.amountMicros * atomicPerMicro),
          actual: String(transfer.amount)
        })
      }
      if (!same(transfer.wallet, event.address)) {
        differences.push({ kind: "transfer_wallet_mismatch", ...ids, expected: event.address, actual: transfer.wallet })
      }
    }
    if (!same(transfer.sender, settlement)) {
      differences.push({ kind: "transfer_sender_mismatch", ...ids, expected: settlement, actual: transfer.sender })
    }
    const signed = transfer.kind === "debit" ? transfer.amount : -transfer.amount
    const open = () => {
      if (signed > 0n) openIn += signed
      else openOut -= signed
    }
    if (transfer.state === "sent" || transfer.minedHash === null) {
      open()
      continue
    }
    const tx = transfer.minedHash
    const receipt = facts.receipts.get(tx.toLowerCase())
    if (receipt === undefined) {
      // Mined, then reorganised away: the engine sends it again; final, it must be there.
      if (transfer.state === "final" || isOld(transfer.createdAt)) {
        differences.push({ kind: "transfer_not_on_chain", ...ids, tx, expected: transfer.state, actual: "no receipt" })
      }
      open()
      continue
    }
    if (receipt.status === "reverted") {
      differences.push({ kind: "transfer_reverted", ...ids, tx })
      continue
    }
    const expected: TransferLog =
      transfer.kind === "debit"
        ? { token: facts.usd1.address, from: transfer.wallet, to: settlement, value: transfer.amount }
        : { token: facts.usd1.address, from: settlement, to: transfer.wallet, value: transfer.amount }
    if (!exactly(receipt, expected)) {
      differences.push({
        kind: "transfer_receipt_mismatch",
        ...ids,
        tx,
        expected: describeLogs([expected]),
        actual: describeLogs(receipt.transfers)
      })
    }
    if (transfer.state === "final" && transfer.block !== receipt.blockNumber) {
      differences.push({
        kind: "transfer_block_mismatch",
        ...ids,
        tx,
        expected: String(transfer.block),
        actual: String(receipt.blockNumber)
      })
    }
    sure += signed
    onChain.add(transfer.eventId)
  }

  // Each clearing once: debited, owed (then perhaps repaid), or pending.
  const clearings = facts.events.filter((event) => event.kind === "clearing")
  const debited: Array<bigint> = []
  const owed: Array<bigint> = []
  const pending: Array<bigint> = []
  const repaidByCard = new Map<string, bigint>()
  const stillOwedByCard = new Map<string, bigint>()
  const add = (map: Map<string, bigint>, key: string, amount: bigint) => map.set(key, (map.get(key) ?? 0n) + amount)
  for (const clearing of clearings) {
    const ids = { eventId: clearing.id, cardId: clearing.cardId }
    const transfer = transferOf.get(clearing.id)
    const entry = owedOf.get(clearing.id)
    const mined = onChain.has(clearing.id)
    switch (clearing.money) {
      case "debited":
        debited.push(clearing.amountMicros)
        if (!mined && clearing.amountMicros > 0n && (transfer === undefined || transfer.state === "final")) {
          differences.push({
            kind: "clearing_not_debited",
            ...ids,
            expected: "its debit transfer on chain",
            actual: transfer === undefined ? "no transfer" : "not on chain"
          })
        }
        if (entry !== undefined) {
          differences.push({ kind: "clearing_counted_twice", ...ids, expected: "debited", actual: "debited and owed" })
        }
        break
      case "owed":
      case "repaid":
        owed.push(clearing.amountMicros)
        add(clearing.money === "owed" ? stillOwedByCard : repaidByCard, clearing.cardId, clearing.amountMicros)
        if (entry === undefined) {
          differences.push({
            kind: "owed_not_recorded",
            ...ids,
            expected: String(clearing.amountMicros),
            actual: "no owed entry"
          })
        }
        if (mined) {
          differences.push({ kind: "clearing_counted_twice", ...ids, expected: clearing.money, actual: "also debited" })
        }
        break
      case "debit_pending":
        pending.push(clearing.amountMicros)
        if (entry !== undefined) {
          differences.push({ kind: "clearing_counted_twice", ...ids, expected: "debit pending", actual: "owed" })
        }
        if (isOld(clearing.createdAt)) {
          differences.push({
            kind: "clearing_pending_too_long",
            ...ids,
            expected: `debited or owed within ${facts.pendingAfterMs} ms`,
            actual: `pending since ${clearing.createdAt.toISOString()}`
          })
        }
        break
      default:
        differences.push({
          kind: "clearing_money_invalid",
          ...ids,
          expected: "debit_pending, debited, owed or repaid",
          actual: String(clearing.money)
        })
    }
  }

  const refunds = facts.events.filter((event) => event.kind === "refund")
  const credited: Array<bigint> = []
  for (const refund of refunds) {
    const ids = { eventId: refund.id, cardId: refund.cardId }
    const transfer = transferOf.get(refund.id)
    if (refund.money === "credited") {
      credited.push(refund.amountMicros)
      if (
        !onChain.has(refund.id) &&
        refund.amountMicros > 0n &&
        (transfer === undefined || transfer.state === "final")
      ) {
        differences.push({
          kind: "refund_not_credited",
          ...ids,
          expected: "its refund transfer on chain",
          actual: transfer === undefined ? "no transfer" : "not on chain"
        })
      }
    } else if (refund.money === "credit_pending") {
      if (isOld(refund.createdAt)) {
        differences.push({
          kind: "refund_pending_too_long",
          ...ids,
          expected: `credited within ${facts.pendingAfterMs} ms`,
          actual: `pending since ${refund.createdAt.toISOString()}`
        })
      }
    } else {
      differences.push({
        kind: "refund_money_invalid",
        ...ids,
        expected: "credit_pending or credited",
        actual: String(refund.money)
      })
    }
  }

  // The owed ledger: each entry against its clearing or its repayment on chain, each card's sum.
  let repayments = 0n
  const entriesByCard = new Map<string, bigint>()
  const repaymentsByCard = new Map<string, bigint>()
  for (const entry of facts.owedEntries) {
    add(entriesByCard, entry.cardId, entry.amountMicros)
    const ids = { cardId: entry.cardId }
    if (entry.eventId !== null) {
      const clearing = eventsById.get(entry.eventId)
      if (
        clearing === undefined ||
        clearing.kind !== "clearing" ||
        clearing.cardId !== entry.cardId ||
        clearing.amountMicros !== entry.amountMicros ||
        (clearing.money !== "owed" && clearing.money !== "repaid")
      ) {
        differences.push({
          kind: "owed_entry_mismatch",
          ...ids,
          eventId: entry.eventId,
          expected: `an owed clearing of ${entry.amountMicros} micros`,
          actual:
            clearing === undefined
              ? "no clearing"
              : `a ${clearing.kind} of ${clearing.amountMicros} micros, ${String(clearing.money)}`
        })
      }
      continue
    }
    if (entry.repaymentTx === null) continue
    const repaid = -entry.amountMicros
    add(repaymentsByCard, entry.cardId, repaid)
    const tx = entry.repaymentTx
    const receipt = facts.receipts.get(tx.toLowerCase())
    const card = cardsById.get(entry.cardId)
    if (receipt === undefined || receipt.status === "reverted") {
      differences.push({
        kind: "repayment_not_on_chain",
        ...ids,
        tx,
        expected: `${repaid} micros repaid`,
        actual: receipt === undefined ? "no receipt" : "reverted"
      })
      continue
    }
    const value = repaid * atomicPerMicro
    const payers = card === undefined ? [] : [card.address, ...(card.agentWallet === null ? [] : [card.agentWallet])]
    if (!payers.some((from) => exactly(receipt, { token: facts.usd1.address, from, to: settlement, value }))) {
      differences.push({
        kind: "repayment_receipt_mismatch",
        ...ids,
        tx,
        expected: `${value} of ${facts.usd1.address} from the card's wallet or its agent's to ${settlement}`,
        actual: describeLogs(receipt.transfers)
      })
    }
    repayments += value
  }
  for (const card of facts.cards) {
    const sum = entriesByCard.get(card.id) ?? 0n
    if (sum !== card.owedMicros) {
      differences.push({
        kind: "owed_total_mismatch",
        cardId: card.id,
        expected: String(sum),
        actual: String(card.owedMicros)
      })
    }
    // Repayments go to the oldest owed first: the repaid clearings are covered, the rest may be in part.
    const repaid = repaymentsByCard.get(card.id) ?? 0n
    const covered = repaidByCard.get(card.id) ?? 0n
    const open = stillOwedByCard.get(card.id) ?? 0n
    if (repaid < covered || repaid > covered + open) {
      differences.push({
        kind: "repaid_mismatch",
        cardId: card.id,
        expected: `between ${covered} and ${covered + open} micros repaid`,
        actual: String(repaid)
      })
    }
  }

  const expected = sure + repayments
  const low = expected - openOut
  const high = expected + openIn
  if (facts.settlementBalance < low || facts.settlementBalance > high) {
    differences.push({
      kind: "settlement_balance_mismatch",
      expected: low === high ? String(expected) : `${low} to ${high} (transfers in flight)`,
      actual: String(facts.settlementBalance)
    })
  }

  const repaidMicros = [...repaymentsByCard.values()].reduce((sum, amount) => sum + amount, 0n)
  const outstanding = facts.cards.reduce((sum, card) => sum + card.owedMicros, 0n)
  return {
    clearings: figure(clearings.map((clearing) => clearing.amountMicros)),
    debited: figure(debited),
    owed: { ...figure(owed), repaidMicros: Number(repaidMicros), outstandingMicros: Number(outstanding) },
    pending: figure(pending),
    refunds: { ...figure(refunds.map((refund) => refund.amountMicros)), credited: figure(credited) },
    settlementAccount: { address: settlement, balance: String(facts.settlementBalance), expected: String(expected) },
    differences
  }
}

/** The hashes whose receipts the reconciliation reads: every mined transfer's and every repayment's. */
export const receiptsToRead = (
  transfers: ReadonlyArray<ProgramTransfer>,
  owedEntries: ReadonlyArray<OwedEntry>
): ReadonlyArray<string> => [
  ...new Set([
    ...transfers.flatMap((transfer) =>
      transfer.state !== "sent" && transfer.minedHash !== null ? [transfer.minedHash.toLowerCase()] : []
    ),
    ...owedEntries.flatMap((entry) => (entry.repaymentTx === null ? [] : [entry.repaymentTx.toLowerCase()]))
  ])
]
