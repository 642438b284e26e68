/**
 * `npm run cards:reconcile` on the devnet and PostgreSQL: a card's clearings debited with real
 * `transferFrom`s under its spending allowance, a refund sent back, one clearing owed and repaid by
 * a real transfer from the card wallet, another still owed, each recorded as the settlement engine
 * records it; the script, run as a child process with the service's settings, agrees (exit 0, its
 * JSON) and so do the background loop's gauges; a difference planted in the database (a transfer's
 * amount, a card's owed total) is reported and exits 1.
 */
import { randomUUID } from "node:crypto"
import { mkdirSync, writeFileSync } from "node:fs"
import path from "node:path"
import { SqlClient } from "@effect/sql"
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Metric } from "effect"
import { erc20Abi, type Hash, type Hex, parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { DIFFERENCE_KINDS } from "../../src/cards/Reconciliation.js"
import { awaitReceipt, type Devnet, walletClientFor } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { prometheusText } from "../../src/observability/Metrics.js"
import { cardHolder } from "../support/agent.js"
import { followedUsd1, fundFromAnvil, signAllowance } from "../support/cards.js"
import { metricValue } from "../support/metrics.js"
import { devnetServiceEnv, runToExit, temporaryDirectory } from "../support/process.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import { DatabaseUrl, OwnDatabase, runReconcile } from "../support/reconcile.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const PROGRAM_KEY = generatePrivateKey()
const SETTLEMENT = privateKeyToAccount(PROGRAM_KEY).address
const usd = (amount: string) => parseUnits(amount, 18)

/** Sends `functionName` of USD1 from the account of `key` and waits for it: its hash, nonce, raw bytes and block. */
const sendUsd1 = (
  devnet: Devnet,
  key: Hex,
  call:
    | { readonly functionName: "transfer"; readonly args: readonly [Hex, bigint] }
    | {
        readonly functionName: "transferFrom"
        readonly args: readonly [Hex, Hex, bigint]
      }
) =>
  Effect.gen(function* () {
    const hash = yield* Effect.promise(() =>
      walletClientFor(devnet, key).writeContract({ address: devnet.usd1, abi: erc20Abi, ...call } as never)
    )
    const receipt = yield* Effect.orDie(awaitReceipt(devnet, hash, call.functionName))
    expect(receipt.status).toBe("success")
    const raw = (yield* devnetRpc(devnet, "eth_getRawTransactionByHash", [hash])) as { result: Hex }
    const tx = (yield* devnetRpc(devnet, "eth_getTransactionByHash", [hash])) as { result: { nonce: Hex } }
    return { hash: hash as Hash, raw: raw.result, nonce: Number(tx.result.nonce), block: receipt.blockNumber }
  })

/** A clearing or refund of the card, as the network's message left it, with its money already moved on. */
const event = (card: { readonly id: string; readonly address: string }, kind: string, micros: bigint, money: string) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = `evt_${randomUUID()}`
    yield* sql`INSERT INTO card_network_events ${sql.insert({
      id,
      transactionId: randomUUID(),
      cardId: card.id,
      address: card.address,
      kind,
      amountMicros: micros.toString(),
      money,
      createdAt: new Date()
    })}`
    return id
  })

/** The settlement account's transfer of an event, recorded as the engine records a final one. */
const recordTransfer = (
  card: { readonly id: string; readonly address: string },
  eventId: string,
  kind: "debit" | "refund",
  amount: bigint,
  sent: { readonly hash: Hash; readonly raw: Hex; readonly nonce: number; readonly block: bigint }
) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const now = new Date()
    return sql`INSERT INTO card_program_transfers ${sql.insert({
      eventId,
      kind,
      cardId: card.id,
      wallet: card.address,
      amount: amount.toString(),
      sender: SETTLEMENT,
      nonce: sent.nonce,
      hash: sent.hash,
      raw: sent.raw,
      signedAt: now,
      state: "final",
      minedHash: sent.hash,
      block: sent.block.toString(),
      createdAt: now,
      settledAt: now
    })}`
  })

const owedEntry = (cardId: string, micros: bigint, link: { eventId: string } | { repaymentTx: string }) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql`INSERT INTO card_owed_entries ${sql.insert({
        cardId,
        amountMicros: micros.toString(),
        eventId: "eventId" in link ? link.eventId : null,
        repaymentTx: "repaymentTx" in link ? link.repaymentTx : null,
        createdAt: new Date()
      })}`
  )

describe("npm run cards:reconcile (devnet)", () => {
  layer(
    testServer(
      { CARD_PROGRAM_KEY: PROGRAM_KEY, CARD_RECONCILE_INTERVAL: "1 second" },
      { kycProvider: ScriptedKycProvider.layer() },
      OwnDatabase
    ),
    { excludeTestServices: true, timeout: "120 seconds" }
  )((it) => {
    it.effect(
      "debits, a refund, owed and repaid amounts on chain reconcile; a planted difference is reported",
      () =>
        Effect.gen(function* () {
          const devnet = yield* TestDevnet
          const sql = yield* SqlClient.SqlClient
          const key = generatePrivateKey()
          const holder = yield* cardHolder("Grace Hopper", privateKeyToAccount(key))
          const card = { id: holder.cardId, address: holder.account.address }
          yield* Effect.orDie(mintUsd1(devnet, holder.account.address, usd("50")))
          // Gas for the repayment the test sends from the card wallet.
          yield* fundFromAnvil(devnet, holder.account.address)
          yield* eventually("the card wallet's balance followed", followedUsd1(card.address), (seen) => seen === 50)
          yield* signAllowance(holder, 100)

          // A $5 clearing debited, $1 of it refunded: the settlement engine's two transfers.
          const cleared = yield* event(card, "clearing", 5_000_000n, "debited")
          const debit = yield* sendUsd1(devnet, PROGRAM_KEY, {
            functionName: "transferFrom",
            args: [holder.account.address, SETTLEMENT, usd("5")]
          })
          yield* recordTransfer(card, cleared, "debit", usd("5"), debit)
          const refunded = yield* event(card, "refund", 1_000_000n, "credited")
          const refund = yield* sendUsd1(devnet, PROGRAM_KEY, {
            functionName: "transfer",
            args: [holder.account.address, usd("1")]
          })
          yield* recordTransfer(card, refunded, "refund", usd("1"), refund)
          // $3 owed then repaid from the card wallet; $2 still owed.
          const repaid = yield* event(card, "clearing", 3_000_000n, "repaid")
          yield* owedEntry(card.id, 3_000_000n, { eventId: repaid })
          const repayment = yield* sendUsd1(devnet, key, { functionName: "transfer", args: [SETTLEMENT, usd("3")] })
          yield* owedEntry(card.id, -3_000_000n, { repaymentTx: repayment.hash })
          const owed = yield* event(card, "clearing", 2_000_000n, "owed")
          yield* owedEntry(card.id, 2_000_000n, { eventId: owed })
          yield* sql`UPDATE cards SET owed_micros = 2000000 WHERE id = ${card.id}`

          const env = yield* devnetServiceEnv(devnet, yield* DatabaseUrl, { CARD_PROGRAM_KEY: PROGRAM_KEY })
          const clean = yield* runReconcile(env)
          expect(clean.code, clean.output).toBe(0)
          expect(clean.summary).toEqual({
            clearings: { count: 3, micros: 10_000_000 },
            debited: { count: 1, micros: 5_000_000 },
            owed: { count: 2, micros: 5_000_000, repaidMicros: 3_000_000, outstandingMicros: 2_000_000 },
            pending: { count: 0, micros: 0 },
            refunds: { count: 1, micros: 1_000_000, credited: { count: 1, micros: 1_000_000 } },
            settlementAccount: { address: SETTLEMENT, balance: String(usd("7")), expected: String(usd("7")) },
            differences: []
          })

          // The service's own loop (every second here) exports the same figures.
          yield* eventually("the reconciliation's gauges", metricValue("card_reconcile_debited"), (n) => n === 1)
          expect(yield* metricValue("card_reconcile_clearings")).toBe(3)
          expect(yield* metricValue("card_reconcile_owed")).toBe(2)
          expect(yield* metricValue("card_reconcile_refunds")).toBe(1)
          expect(yield* metricValue("card_reconcile_owed_outstanding_usd")).toBe(2)
          expect(yield* metricValue('card_reconcile_differences{kind="settlement_balance_mismatch"}')).toBe(0)
          expect(yield* metricValue("card_reconcile_last_run_timestamp_seconds")).toBeGreaterThan(
            Date.now() / 1000 - 60
          )
          const text = prometheusText(yield* Metric.snapshot)
          expect(text.split("\n").filter((line) => line.startsWith("card_reconcile_differences{"))).toHaveLength(
            DIFFERENCE_KINDS.length
          )
          if (!withoutPromtool) expect(promtoolProblems(text)).toBe("")

          // Planted: the debit recorded for $6 where the chain moved $5.
          yield* sql`UPDATE card_program_transfers SET amount = ${usd("6").toString()} WHERE event_id = ${cleared}`
          const wrongAmount = yield* runReconcile(env)
          expect(wrongAmount.code).toBe(1)
          expect(wrongAmount.summary.differences).toEqual([
            {
              kind: "transfer_amount_mismatch",
              eventId: cleared,
              cardId: card.id,
              expected: String(usd("5")),
              actual: String(usd("6"))
            },
            expect.objectContaining({ kind: "transfer_receipt_mismatch", eventId: cleared, tx: debit.hash }),
            { kind: "settlement_balance_mismatch", expected: String(usd("8")), actual: String(usd("7")) }
          ])
          yield* sql`UPDATE card_program_transfers SET amount = ${usd("5").toString()} WHERE event_id = ${cleared}`

          // Planted: the card's owed total no longer its entries' sum.
          yield* sql`UPDATE cards SET owed_micros = 1 WHERE id = ${card.id}`
          const wrongOwed = yield* runReconcile(env)
          expect(wrongOwed.code).toBe(1)
          expect(wrongOwed.summary.differences).toEqual([
            { kind: "owed_total_mismatch", cardId: card.id, expected: "2000000", actual: "1" }
          ])
          yield* eventually(
            "the planted difference in the gauges",
            metricValue('card_reconcile_differences{kind="owed_total_mismatch"}'),
            (n) => n === 1
          )
        }).pipe(Effect.scoped),
      { timeout: 120_000 }
    )
  })
})

describe("npm run cards:reconcile on the embedded defaults", () => {
  it.effect("refuses while the service's embedded PostgreSQL runs on its DATA_DIR, and starts nothing", () =>
    Effect.gen(function* () {
      const dataDir = yield* temporaryDirectory("card-reconcile-data-")
      // A live pid where the embedded PostgreSQL records its own: this test's process.
      mkdirSync(path.join(dataDir, "pg"))
      writeFileSync(path.join(dataDir, "pg", "postmaster.pid"), `${process.pid}\n${dataDir}\n`)
      const { code, output } = yield* runToExit(process.execPath, ["--import", "tsx", "scripts/cards-reconcile.ts"], {
        PATH: process.env.PATH ?? "",
        HOME: process.env.HOME ?? "",
        DATA_DIR: dataDir
      })
      expect(code, output).toBe(2)
      expect(output).toContain("the embedded PostgreSQL of DATA_DIR run (the service is up)")
      expect(output).not.toContain("started")
    }).pipe(Effect.scoped)
  )
})
