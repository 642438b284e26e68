/**
 * Finality of the agent's refills on the real service over a devnet: a wallet's first live refill
 * (its approval of the exchange, a token sale, then the USD1 send to the card) whose blocks are
 * reorganised out (`anvil_reorg`: replaced by empty ones) has the very same three signed transactions
 * mined again, in nonce order; the card is refilled once, the decision is executed once, the
 * statement shows the refill once, final after the confirmations. One whose sale reverts when mined again (its price fell) and whose send then cannot
 * be paid: the decision is failed and leaves the statement, the card was never paid.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { createPublicClient, encodeAbiParameters, type Hex, http, keccak256, numberToHex, parseUnits } from "viem"
import { agentWalletKey } from "../../src/agent/ChainAgentWallet.js"
import { startDevnet } from "../../src/chain/Devnet.js"
import { setStockPrice } from "../../src/chain/DevnetOperator.js"
import {
  approveExchange,
  awaitRow,
  FRIDAY_1540_ET,
  fund,
  newCustomer,
  serviceEnv,
  spawnTick,
  usd1Of
} from "../agent/support/liveAgent.js"
import { callService, logLines, type ServiceProcess, startService, stopService } from "../support/process.js"
import { devnetRpc as rpc, usd1TransfersTo } from "../support/TestChain.js"
import { queryDatabase as query, temporaryDatabaseUrl } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const CONFIRMATIONS = 5

interface JournalRow {
  readonly step: string
  readonly hash: Hex
  readonly status: string
  readonly finality: string
  readonly nonce: string
  readonly blockNumber: string | null
  readonly blockHash: string | null
}

const journalOf = (databaseUrl: string, decisionId: string) =>
  query<JournalRow>(
    databaseUrl,
    `SELECT step, hash, status, finality, nonce, block_number AS "blockNumber", block_hash AS "blockHash"
     FROM agent_transactions WHERE decision_id = $1 ORDER BY nonce`,
    [decisionId]
  )

/** The service's WARN messages. */
const warningsOf = (service: ServiceProcess) =>
  logLines(service.output())
    .filter((line) => line.logLevel === "WARN")
    .map((line) => String(line.message))

/**
 * A live refill executed and mined (a sale, then the send to the card; before them the exchange's
 * approval unless `approvedBefore`), decided by one tick at an hour a token may be sold, with no
 * service running afterwards; then its blocks replaced by empty ones.
 */
const refillReorganisedOut = (approvedBefore: boolean) =>
  Effect.gen(function* () {
    const devnet = yield* startDevnet().pipe(Effect.orDie)
    const client = createPublicClient({ transport: http(devnet.rpcUrl) })
    const databaseUrl = yield* temporaryDatabaseUrl
    const env = yield* serviceEnv(devnet, databaseUrl, {
      AGENT_MODE: "live",
      AGENT_INTERVAL: "1 hour",
      AGENT_POLL: "200 millis",
      CHAIN_CONFIRMATIONS: String(CONFIRMATIONS)
    })
    // The customer (decided dry meanwhile), and a wallet with stock tokens (whose approval of the
    // exchange is mined before the refill when `approvedBefore`).
    const service = yield* startService({ ...env, AGENT_MODE: "dry" })
    const customer = yield* newCustomer(service, { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 140 })
    yield* fund(devnet, [customer.wallet], { stocks: true })
    const [card] = yield* query<{ id: string }>(databaseUrl, "SELECT id FROM cards WHERE address = $1", [
      customer.address
    ])
    if (approvedBefore) yield* approveExchange(devnet, agentWalletKey(Redacted.make(env.AGENT_WALLET_SEED), card!.id))
    yield* stopService(service, "SIGTERM")

    yield* query(databaseUrl, "UPDATE agent_strategies SET due_at = now()")
    yield* spawnTick(env, FRIDAY_1540_ET)
    const decision = yield* awaitRow<{ id: string; usd: number; symbol: string; status: string }>(
      databaseUrl,
      "SELECT id, usd, symbol, status FROM agent_decisions WHERE action = 'refill' AND status <> 'dry-run'",
      [],
      (row) => row?.status === "executed"
    )
    const mined = yield* journalOf(databaseUrl, decision.id)
    expect(mined.map((tx) => [tx.step, tx.status, tx.finality])).toEqual([
      ...(approvedBefore ? [] : [["approve", "succeeded", "mined"]]),
      ["sell", "succeeded", "mined"],
      ["send", "succeeded", "mined"]
    ])
    expect(mined.map((tx) => Number(tx.nonce) - Number(mined[0]!.nonce))).toEqual(mined.map((_, i) => i))
    const refill = parseUnits(decision.usd.toFixed(2), 18)
    expect(yield* usd1Of(devnet, customer.address)).toBe(refill)

    const head = yield* Effect.promise(() => client.getBlockNumber())
    const firstBlock = BigInt(mined[0]!.blockNumber!)
    expect(head).toBe(BigInt(mined.at(-1)!.blockNumber!))
    const reorg = (yield* rpc(devnet, "anvil_reorg", [Number(head - firstBlock + 1n), []])) as {
      readonly error?: unknown
    }
    expect(reorg.error).toBeUndefined()
    for (const tx of mined) {
      const gone = yield* Effect.promise(() => client.getBlock({ blockNumber: BigInt(tx.blockNumber!) }))
      expect(gone.hash).not.toBe(tx.blockHash)
      expect(gone.transactions).not.toContain(tx.hash)
    }
    return { devnet, client, databaseUrl, env, customer, decision, mined, refill }
  })

describe("an agent refill reorganised out", () => {
  it.live(
    "is mined again as the same approval, sale and send: the card refilled once, the decision and the statement once",
    () =>
      Effect.gen(function* () {
        const { client, customer, databaseUrl, decision, devnet, env, mined, refill } =
          yield* refillReorganisedOut(false)
        const service = yield* startService(env)
        const { token } = customer

        // The same three transactions mined again, in new blocks, in nonce order.
        const again = yield* eventually(
          "the approval, the sale and the send to be mined again",
          journalOf(databaseUrl, decision.id),
          (rows) =>
            rows.length === 3 && rows.every((tx, i) => tx.blockHash !== null && tx.blockHash !== mined[i]!.blockHash),
          { explain: () => service.output().slice(-3000) }
        )
        expect(again.map((tx) => tx.hash)).toEqual(mined.map((tx) => tx.hash))
        const blocks = again.map((tx) => BigInt(tx.blockNumber!))
        expect([...blocks].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))).toEqual(blocks)
        for (const tx of again) {
          const receipt = yield* Effect.promise(() => client.getTransactionReceipt({ hash: tx.hash }))
          expect(receipt.status).toBe("success")
          expect(receipt.blockHash).toBe(tx.blockHash)
        }

        // Deep enough: final, never looked at again.
        for (let i = 0; i < CONFIRMATIONS; i++) yield* rpc(devnet, "evm_mine")
        yield* eventually(
          "the approval, the sale and the send to be final",
          journalOf(databaseUrl, decision.id),
          (rows) => rows.every((tx) => tx.finality === "final")
        )

        // The card received the refill once; the decision and the statement show it once.
        const transfers = yield* usd1TransfersTo(devnet, [customer.address])
        expect(transfers.map((log) => log.transactionHash)).toEqual([mined[2]!.hash])
        expect(yield* usd1Of(devnet, customer.address)).toBe(refill)
        const decisions = (yield* callService(service, "GET", "/agent/decisions", { token })).body
        // (A dry-run refill may have been stored while the customer was made.)
        const refills = decisions.filter(
          (item: { action: string; status: string }) => item.action === "refill" && item.status !== "dry-run"
        )
        expect(refills).toHaveLength(1)
        expect(refills[0]).toMatchObject({ status: "executed", txs: mined.map((tx) => tx.hash), error: null })
        const statement = (yield* callService(service, "GET", "/me/activity", { token })).body
        expect(statement).toHaveLength(1)
        expect(statement[0]).toMatchObject({ type: "refill", tx: mined[2]!.hash, usd: decision.usd })

        const warnings = warningsOf(service)
        expect(warnings).toContain("agent approve transaction no longer on chain; sending the same transaction again")
        expect(warnings).toContain("agent sell transaction no longer on chain; sending the same transaction again")
        expect(warnings).toContain("agent send transaction no longer on chain; sending the same transaction again")
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "whose sale now reverts and whose send cannot be paid: the decision is failed, off the statement, the card unpaid",
    () =>
      Effect.gen(function* () {
        const { customer, databaseUrl, decision, devnet, env, mined } = yield* refillReorganisedOut(true)
        // Before the service sends them again: the token's price falls far below the sale's minimum,
        // and the wallet holds no USD1 of its own to pay the send without the sale.
        yield* setStockPrice(devnet, decision.symbol, 0.01).pipe(Effect.orDie)
        yield* rpc(devnet, "anvil_setStorageAt", [
          devnet.usd1,
          keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [customer.wallet, 0n])),
          numberToHex(0n, { size: 32 })
        ])
        const service = yield* startService(env)
        const { token } = customer

        const failed = yield* awaitRow<{ status: string; error: string | null }>(
          databaseUrl,
          "SELECT status, error FROM agent_decisions WHERE id = $1",
          [decision.id],
          (row) => row?.status === "failed"
        )
        expect(failed.error).toBe(
          `the send transaction ${mined[1]!.hash} was lost by the chain and reverted when mined again`
        )
        const journal = yield* eventually("both transactions dropped", journalOf(databaseUrl, decision.id), (rows) =>
          rows.every((tx) => tx.finality === "dropped")
        )
        expect(journal.map((tx) => [tx.step, tx.status, tx.finality])).toEqual([
          ["sell", "failed", "dropped"],
          ["send", "failed", "dropped"]
        ])

        // Never paid: no transfer reached the card; the statement does not show the refill.
        expect(yield* usd1TransfersTo(devnet, [customer.address])).toEqual([])
        expect(yield* usd1Of(devnet, customer.address)).toBe(0n)
        const decisions = (yield* callService(service, "GET", "/agent/decisions", { token })).body
        // (A dry-run refill may have been stored while the customer was made.)
        const refills = decisions.filter(
          (item: { action: string; status: string }) => item.action === "refill" && item.status !== "dry-run"
        )
        expect(refills).toHaveLength(1)
        expect(refills[0]).toMatchObject({ status: "failed", txs: mined.map((tx) => tx.hash) })
        expect((yield* callService(service, "GET", "/me/activity", { token })).body).toEqual([])
        const warnings = warningsOf(service)
        expect(warnings).toContain(`agent refill undone: ${failed.error}; the decision is failed`)
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    300_000
  )
})
