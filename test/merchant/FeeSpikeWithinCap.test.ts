/**
 * Issue 44, acceptance: a base-fee spike within MAX_FEE_PER_GAS (100 gwei under a 500 gwei cap) with
 * payments flowing, driven by blocks. The next block's base fee is raised before it is mined: the
 * payments made then are signed with the fee estimate of the blocks before and refused (they wait at
 * their nonces); those made once the spike's first block is seen pay its fee and wait in the pool
 * behind them. Nonce checks find that gap open head after head while the spike lasts; it is logged
 * once (one WARN when it opens, one INFO when it closes) and counted once per transaction, and after
 * the spike every payment settles once, with no empty fill and no revert. RELAYER_STUCK_AFTER is
 * long, so the refused transactions are sent again by the gap's close, not replaced by a fee bump.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { createPublicClient, http, isAddressEqual, parseGwei, toHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { captureLogs } from "../support/logs.js"
import { metricValue } from "../support/metrics.js"
import { signedOrder } from "../support/settlements.js"
import { devnetRpc, TestDevnet, usd1TransfersTo } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { enoughFor } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
/** Payments before the spike's first block (refused, waiting) and after it (in the pool behind them). */
const EARLY = 3
const LATE = 3
/** Nonce checks that must find the gap open while the spike lasts. */
const CHECKS_IN_SPIKE = 3

const logs = captureLogs()
const said = (level: "INFO" | "WARN", prefix: string) => logs.said(level, prefix).map((line) => line.message)
const gapCount = (action: "resent" | "filled") =>
  metricValue(`relayer_nonce_gap_transactions_total{action="${action}"}`)

/** The nonces a closed gap's INFO line names ("nonces 4-6, 9; ..."). */
const gapNonces = (line: string) =>
  /nonces ([\d, -]+);/
    .exec(line)![1]!
    .split(", ")
    .flatMap((range) => {
      const [from, to = from] = range.split("-").map(Number)
      return Array.from({ length: to! - from! + 1 }, (_, i) => from! + i)
    })

layer(
  testServer({
    MERCHANT_PAY_TO: merchant.address,
    MAX_FEE_PER_GAS: "500",
    RELAYER_STUCK_AFTER: "10 minutes",
    RECONCILE_INTERVAL: "500 millis",
    SETTLEMENT_WAIT: "1 second",
    // the nonce checks and the gap's closing line are INFO
    LOG_LEVEL: "Info"
  }).pipe(Layer.provide(logs.layer)),
  { excludeTestServices: true, timeout: "180 seconds" }
)("a base-fee spike within MAX_FEE_PER_GAS, block by block", (it) => {
  it.effect("a nonce gap open over many checks is one WARN; after the spike each payment settles once", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const sql = yield* SqlClient.SqlClient
      const client = createPublicClient({ transport: http(devnet.rpcUrl), cacheTime: 0 })
      const setNextBaseFee = (wei: bigint) => devnetRpc(devnet, "anvil_setNextBlockBaseFeePerGas", [toHex(wei)])
      const spikeBlock = setNextBaseFee(parseGwei("100")).pipe(Effect.zipRight(devnetRpc(devnet, "evm_mine")))
      const payers = Array.from({ length: EARLY + LATE }, () => privateKeyToAccount(generatePrivateKey()))
      for (const payer of payers) yield* mintUsd1(devnet, payer.address, enoughFor("2")).pipe(Effect.orDie)
      const orders = yield* Effect.forEach(payers, (payer) => signedOrder(payer, "2", "fee spike within the cap"))
      const pay = (order: (typeof orders)[number]) =>
        send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "PAYMENT-SIGNATURE": order.header } }).pipe(
          Effect.map((answer) => answer.status)
        )
      const before = yield* Effect.promise(() => client.getBlock())
      const firstNonce = yield* Effect.promise(() => client.getTransactionCount({ address: RELAYER }))
      const resentBefore = yield* gapCount("resent")
      const filledBefore = yield* gapCount("filled")
      const checks = () => said("INFO", "relayer nonce check now: the chain counts").length

      yield* devnetRpc(devnet, "evm_setAutomine", [false])
      yield* setNextBaseFee(parseGwei("100"))
      const early = yield* Effect.forEach(orders.slice(0, EARLY), pay)
      yield* spikeBlock
      yield* eventually(
        "the relayer to see the spike's first block",
        Effect.sync(() => said("INFO", "relayer nonce check now: relayer").length),
        (seen) => seen > 0
      )
      const late = yield* Effect.forEach(orders.slice(EARLY), pay)
      // Blocks of the spike until the gap has been checked CHECKS_IN_SPIKE times.
      const checksBefore = checks()
      yield* eventually(
        `${CHECKS_IN_SPIKE} nonce checks during the spike`,
        spikeBlock.pipe(Effect.zipRight(Effect.sync(checks))),
        (seen) => seen - checksBefore >= CHECKS_IN_SPIKE
      )
      const warnedInSpike = said("WARN", "relayer nonce gap:")

      yield* devnetRpc(devnet, "evm_setAutomine", [true])
      yield* setNextBaseFee(before.baseFeePerGas!)
      yield* devnetRpc(devnet, "evm_mine")
      for (const { id } of orders) {
        yield* eventually(
          `order ${id} to be paid`,
          send("GET", `/merchant/orders/${id}`).pipe(Effect.map((response) => response.body.status)),
          (status) => status === "paid"
        )
      }
      yield* eventually(
        "the gap to close",
        Effect.sync(() => said("INFO", "the relayer's nonce gap is closed")),
        (closed) => closed.length > 0
      )

      const settlements = yield* sql<{ readonly status: string }>`
        SELECT status FROM settlements WHERE order_id IN ${sql.in(orders.map((o) => o.id))}`
      expect(settlements.map((row) => row.status)).toEqual(Array(EARLY + LATE).fill("succeeded"))
      const transfers = yield* usd1TransfersTo(devnet, merchant.address)
      const head = yield* Effect.promise(() => client.getBlockNumber())
      const blocks = yield* Effect.forEach(Array.from({ length: Number(head - before.number) }), (_, i) =>
        Effect.promise(() =>
          client.getBlock({ blockNumber: before.number + 1n + BigInt(i), includeTransactions: true })
        )
      )
      const relayed = blocks.flatMap((block) => block.transactions).filter((tx) => isAddressEqual(tx.from, RELAYER))
      const receipts = yield* Effect.forEach(relayed, (tx) =>
        Effect.promise(() => client.getTransactionReceipt({ hash: tx.hash }))
      )
      const gapWarnings = said("WARN", "relayer nonce gap:")
      const gapsClosed = said("INFO", "the relayer's nonce gap is closed")
      const inGaps = gapsClosed.flatMap(gapNonces)
      const resent = (yield* gapCount("resent")) - resentBefore
      const filled = (yield* gapCount("filled")) - filledBefore
      console.log(
        `fee spike within the cap: early ${early.join(" ")}, late ${late.join(" ")}; ` +
          `${checks() - checksBefore} nonce checks after the late payments, ${said("WARN", "settlement transaction waits").length} waited; ` +
          `${gapWarnings.length} gap WARN, ${gapsClosed.length} closed (${gapsClosed.join(" | ")}); ` +
          `counted ${resent} resent ${filled} filled; ${relayed.length} relayer transactions for ${transfers.length} transfers`
      )
      expect([...early, ...late].every((status) => status === 200 || status === 202)).toBe(true)
      // The early ones waited refused; the late ones were taken into the pool (not refused).
      expect(said("WARN", "settlement transaction waits at nonce")).toHaveLength(EARLY)
      // One gap, open over several checks: one WARN (already while the spike lasted), one INFO.
      expect(warnedInSpike).toHaveLength(1)
      expect([gapWarnings.length, gapsClosed.length]).toEqual([1, 1])
      // The counter counts each of the gap's transactions once, as they are on chain: no fill.
      expect(inGaps).toEqual(Array.from({ length: EARLY + LATE }, (_, i) => firstNonce + i))
      expect([resent, filled]).toEqual([EARLY + LATE, 0])
      expect(relayed.map((tx) => [tx.nonce, tx.to])).toEqual(inGaps.map((nonce) => [nonce, devnet.usd1.toLowerCase()]))
      expect(receipts.every((receipt) => receipt.status === "success")).toBe(true)
      expect(new Set(transfers.map((log) => log.transactionHash)).size).toBe(EARLY + LATE)
    }).pipe(Effect.ensuring(Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "evm_setAutomine", [true]))))
  )
})
