/**
 * A repayment of what a card owes the card program survives a crash like the agent's other steps:
 * a tick SIGKILLed once the repayment is recorded, before it is mined, is continued by the next
 * start's reconciler (the recorded transaction, never a second one), and the program is paid once.
 */
import { randomUUID } from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { awaitRow, FRIDAY_1540_ET, fund, newCustomer, serviceEnv, spawnTick } from "../agent/support/liveAgent.js"
import { startService, stopService } from "../support/process.js"
import { devnetWithDatabase, devnetRpc as rpc, usd1TransfersTo } from "../support/TestChain.js"
import { queryDatabase as query } from "../support/TestDatabase.js"

/** No weekly spend: the card needs nothing but its repayment, paid from the wallet's USD1 in any session. */
const strategy = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 0 }
const PROGRAM_KEY = `0x${"5e".repeat(32)}` as const

describe("the agent's repayment across a crash", () => {
  it.live(
    "a tick killed after its repayment is recorded and before it is mined: the restart finishes it, the program is paid once",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        const env = yield* serviceEnv(devnet, databaseUrl, {
          AGENT_MODE: "live",
          AGENT_INTERVAL: "1 hour",
          AGENT_LEASE: "1 second",
          CARD_PROGRAM_KEY: PROGRAM_KEY
        })
        const settlement = privateKeyToAccount(PROGRAM_KEY).address
        const service = yield* startService(env)
        const customer = yield* newCustomer(service, strategy)
        yield* fund(devnet, [customer.wallet])
        yield* Effect.orDie(mintUsd1(devnet, customer.address, parseUnits("100", 18)))
        // What the settlement engine leaves for a clearing it could not debit.
        const [card] = yield* query<{ id: string }>(databaseUrl, "SELECT id FROM cards WHERE address = $1", [
          customer.address
        ])
        const eventId = `clearing-${randomUUID()}`
        yield* query(
          databaseUrl,
          `WITH event AS (
             INSERT INTO card_network_events (id, transaction_id, card_id, address, kind, amount_micros, money,
                                              merchant_name, merchant_mcc, merchant_country, created_at)
             VALUES ($1, $2, $3, $4, 'clearing', 7654321, 'owed', 'Blue Bottle', '5814', 'USA', now())
             RETURNING id
           ), entry AS (
             INSERT INTO card_owed_entries (card_id, amount_micros, event_id, created_at)
             SELECT $3, 7654321, id, now() FROM event
           )
           UPDATE cards SET owed_micros = owed_micros + 7654321 WHERE id = $3`,
          [eventId, randomUUID(), card!.id, customer.address]
        )
        yield* stopService(service, "SIGTERM")

        // The tick records the repayment, and is killed before anything is mined.
        yield* rpc(devnet, "evm_setAutomine", [false])
        const tick = yield* spawnTick(env, FRIDAY_1540_ET)
        const recorded = yield* awaitRow<{ decisionId: string }>(
          databaseUrl,
          `SELECT decision_id AS "decisionId" FROM agent_transactions WHERE step = 'repay'`,
          [],
          (row) => row !== undefined
        )
        tick.kill("SIGKILL")
        yield* rpc(devnet, "evm_mine")
        yield* rpc(devnet, "evm_setAutomine", [true])

        // The next start continues the decision: the same repayment confirmed (or sent again), then the send.
        const restarted = yield* startService({ ...env, AGENT_INTERVAL: "1 second" })
        yield* awaitRow<{ status: string }>(
          databaseUrl,
          `SELECT status FROM agent_decisions WHERE id = $1`,
          [recorded.decisionId],
          (row) => row?.status === "executed"
        )
        // Time for a second repayment, were one made.
        yield* Effect.sleep("3 seconds")
        yield* stopService(restarted, "SIGTERM")

        const paid = yield* usd1TransfersTo(devnet, settlement)
        expect(paid.map((log) => log.args.value)).toEqual([7_654_321n * 10n ** 12n])
        const [books] = yield* query<{ owed: string; total: string; entries: number; money: string; told: number }>(
          databaseUrl,
          `SELECT (SELECT owed_micros::text FROM cards WHERE id = $1) AS owed,
                  (SELECT sum(amount_micros)::text FROM card_owed_entries WHERE card_id = $1) AS total,
                  (SELECT count(*)::int FROM card_owed_entries WHERE card_id = $1) AS entries,
                  (SELECT money FROM card_network_events WHERE id = $2) AS money,
                  (SELECT count(*)::int FROM events WHERE address = $3 AND type = 'money'
                     AND data::jsonb ->> 'change' = 'repaid') AS told`,
          [card!.id, eventId, customer.address]
        )
        expect(books).toEqual({ owed: "0", total: "0", entries: 2, money: "repaid", told: 1 })
        const repays = yield* query(databaseUrl, `SELECT 1 FROM agent_transactions WHERE step = 'repay'`)
        expect(repays).toHaveLength(1)
      }).pipe(Effect.scoped),
    300_000
  )
})
