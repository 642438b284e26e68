/**
 * The agent loop across processes and crashes: the real service as separate processes over one
 * database and one devnet. Cards are made through the real sign-in and sandbox identity check.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, Redacted } from "effect"
import { parseUnits } from "viem"
import { agentWalletKey } from "../../src/agent/ChainAgentWallet.js"
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
import { startService, stopService } from "../support/process.js"
import { devnetWithDatabase, devnetRpc as rpc, usd1TransfersTo } from "../support/TestChain.js"
import { queryDatabase as query } from "../support/TestDatabase.js"
import { DEFAULT_WAIT, eventually } from "../support/wait.js"

// Cash refills (below the $10 floor, paid from the agent wallet's USD1) are allowed in every session,
// so these tests do not depend on the hour they run at.
const cashRefill = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 0 }

/** A devnet, a database of its own and a live agent that ticks only when a test makes it (an hour apart). */
const liveAgent = (settings: Record<string, string>) =>
  Effect.gen(function* () {
    const { devnet, databaseUrl } = yield* devnetWithDatabase
    const env = yield* serviceEnv(devnet, databaseUrl, {
      AGENT_MODE: "live",
      AGENT_INTERVAL: "1 hour",
      AGENT_LEASE: "1 second",
      ...settings
    })
    return { devnet, databaseUrl, env }
  })

/**
 * The service started again, ticking every second, until the decision `decisionSql` reads is
 * executed; then a few seconds more (for a second send, were one made) and stopped.
 */
const restartUntilExecuted = (
  env: Record<string, string>,
  databaseUrl: string,
  decisionSql: string,
  params: ReadonlyArray<unknown> = []
) =>
  Effect.gen(function* () {
    const service = yield* startService({ ...env, AGENT_INTERVAL: "1 second" })
    yield* awaitRow<{ status: string }>(databaseUrl, decisionSql, params, (row) => row?.status === "executed")
    yield* Effect.sleep("3 seconds")
    yield* stopService(service, "SIGTERM")
  })

describe("the agent loop across processes", () => {
  it.live(
    "two replicas share 50 cards: each decided once per interval, and live refills equal transfers",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        // A trade that a passing fault stops (a chain or database bound met on a loaded machine) is
        // continued by the reconciler once its lease ends: a short lease keeps that within the wait.
        const agent = {
          AGENT_INTERVAL: "3 seconds",
          AGENT_BATCH: "5",
          AGENT_CONCURRENCY: "4",
          AGENT_LEASE: "10 seconds"
        }
        const envs = [
          yield* serviceEnv(devnet, databaseUrl, { ...agent, AGENT_MODE: "dry" }),
          yield* serviceEnv(devnet, databaseUrl, { ...agent, AGENT_MODE: "dry" })
        ]
        const dry = yield* Effect.all(
          envs.map((env) => startService(env)),
          { concurrency: "unbounded" }
        )
        const customers = yield* Effect.forEach(
          Array.from({ length: 50 }),
          (_, i) => newCustomer(dry[i % 2]!, cashRefill),
          { concurrency: 5 }
        )
        yield* fund(
          devnet,
          customers.map((customer) => customer.wallet)
        )
        // Decided from here on: every card a dry-run cash refill each interval.
        const funded = new Date()
        yield* eventually(
          "every card to be decided in 3 intervals",
          query<{ n: number }>(
            databaseUrl,
            `SELECT count(*)::int AS n FROM (SELECT card_id FROM agent_decisions WHERE at > $1
               GROUP BY card_id HAVING count(*) >= 3) AS decided`,
            [funded]
          ),
          ([row]) => row?.n === 50
        )
        yield* Effect.forEach(dry, (service) => stopService(service, "SIGTERM"), { concurrency: "unbounded" })

        // Dry: one decision per card and interval (each a dry-run cash refill), intervals back to back.
        const rows = yield* query<{ cardId: string; dueAt: Date; status: string; replica: string }>(
          databaseUrl,
          `SELECT card_id AS "cardId", due_at AS "dueAt", status, replica FROM agent_decisions
           WHERE at > $1 ORDER BY card_id, due_at`,
          [funded]
        )
        const byCard = new Map<string, Array<(typeof rows)[number]>>()
        for (const row of rows) byCard.set(row.cardId, [...(byCard.get(row.cardId) ?? []), row])
        expect(byCard.size).toBe(50)
        for (const decided of byCard.values()) {
          expect(decided.length).toBeGreaterThanOrEqual(3)
          expect(decided.every((row) => row.status === "dry-run")).toBe(true)
          const gaps = decided.slice(1).map((row, i) => row.dueAt.getTime() - decided[i]!.dueAt.getTime())
          expect(new Set(gaps)).toEqual(new Set([3_000]))
        }
        expect(new Set(rows.map((row) => row.replica)).size).toBe(2)
        expect(
          yield* usd1TransfersTo(
            devnet,
            customers.map((c) => c.address)
          )
        ).toHaveLength(0)

        // Live: every card is refilled once from its wallet's cash, by one replica or the other.
        const live = yield* Effect.all(
          envs.map((env) => startService({ ...env, AGENT_MODE: "live" })),
          { concurrency: "unbounded" }
        )
        yield* eventually(
          "50 executed refills",
          query<{ status: string; n: number }>(
            databaseUrl,
            `SELECT status, count(*)::int AS n FROM agent_decisions WHERE status <> 'dry-run' GROUP BY status`
          ),
          (byStatus) => byStatus.find((row) => row.status === "executed")?.n === 50
        )
        // Time for a second refill of a card, were the loop to send one.
        yield* Effect.sleep("4 seconds")
        yield* Effect.forEach(live, (service) => stopService(service, "SIGTERM"), { concurrency: "unbounded" })
        const executed = yield* query<{ replica: string }>(
          databaseUrl,
          `SELECT replica FROM agent_decisions WHERE status = 'executed'`
        )
        expect(executed).toHaveLength(50)
        expect(new Set(executed.map((row) => row.replica)).size).toBe(2)
        expect(
          yield* usd1TransfersTo(
            devnet,
            customers.map((c) => c.address)
          )
        ).toHaveLength(50)
        for (const { address } of customers) expect(yield* usd1Of(devnet, address)).toBe(parseUnits("10", 18))
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "a tick killed after its sale is mined and before its send: the restart sends once, the decision ends executed",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl, env } = yield* liveAgent({})
        const service = yield* startService(env)
        // A weekly spend that a token sale, not the wallet's cash, has to cover.
        const customer = yield* newCustomer(service, { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 140 })
        yield* fund(devnet, [customer.wallet], { stocks: true })
        // The wallet's one-time approval of the exchange is mined before mining stops.
        const [card] = yield* query<{ id: string }>(databaseUrl, "SELECT id FROM cards WHERE address = $1", [
          customer.address
        ])
        yield* approveExchange(devnet, agentWalletKey(Redacted.make(env.AGENT_WALLET_SEED), card!.id))
        yield* stopService(service, "SIGTERM")

        yield* rpc(devnet, "evm_setAutomine", [false])
        const tick = yield* spawnTick(env, FRIDAY_1540_ET)
        const decision = yield* awaitRow<{ id: string; usd: number }>(
          databaseUrl,
          `SELECT d.id, d.usd FROM agent_decisions d JOIN agent_transactions t ON t.decision_id = d.id AND t.step = 'sell'`,
          [],
          (row) => row !== undefined
        )
        tick.kill("SIGKILL")
        // The sale is mined while nothing of ours runs.
        yield* rpc(devnet, "evm_mine")
        yield* rpc(devnet, "evm_setAutomine", [true])
        expect(yield* query(databaseUrl, `SELECT 1 FROM agent_transactions WHERE step = 'send'`)).toHaveLength(0)

        yield* restartUntilExecuted(env, databaseUrl, `SELECT status FROM agent_decisions WHERE id = $1`, [decision.id])
        const sent = yield* usd1TransfersTo(devnet, [customer.address])
        expect(sent).toHaveLength(1)
        expect(yield* usd1Of(devnet, customer.address)).toBe(parseUnits(decision.usd.toFixed(2), 18))
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "SIGTERM during a tick's trade exits promptly, and the next start finishes the trade",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl, env } = yield* liveAgent({
          SHUTDOWN_GRACE: "3 seconds",
          // The trade would wait an hour for its receipt: only a prompt shutdown ends the service sooner.
          AGENT_TX_TIMEOUT: "1 hour"
        })
        let service = yield* startService(env)
        const customer = yield* newCustomer(service, cashRefill)
        yield* fund(devnet, [customer.wallet])
        yield* stopService(service, "SIGTERM")

        // The next start's first tick sends the cash refill, and waits for a receipt that never comes.
        yield* rpc(devnet, "evm_setAutomine", [false])
        service = yield* startService(env)
        yield* awaitRow(
          databaseUrl,
          `SELECT 1 FROM agent_transactions WHERE step = 'send'`,
          [],
          (row) => row !== undefined
        )
        const code = yield* stopService(service, "SIGTERM").pipe(
          Effect.timeoutFail({
            duration: DEFAULT_WAIT,
            onTimeout: () => new Error("the service did not exit while its trade waited for a receipt")
          }),
          Effect.orDie
        )
        expect(code).toBe(0)
        const [left] = yield* query<{ status: string }>(databaseUrl, `SELECT status FROM agent_decisions`)
        expect(left?.status).toBe("executing")

        yield* rpc(devnet, "evm_setAutomine", [true])
        yield* rpc(devnet, "evm_mine")
        yield* restartUntilExecuted(env, databaseUrl, `SELECT status FROM agent_decisions ORDER BY id LIMIT 1`)
        expect(yield* usd1TransfersTo(devnet, [customer.address])).toHaveLength(1)
        expect(yield* usd1Of(devnet, customer.address)).toBe(parseUnits("10", 18))
      }).pipe(Effect.scoped),
    300_000
  )
})
