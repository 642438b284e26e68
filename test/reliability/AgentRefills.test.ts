/**
 * The agent live at scale (reliability suite: it moves a thousand transactions): 1,000 cards below
 * their floor in one interval, two replicas of the real service sharing them on one database and
 * one devnet. Every refill is executed exactly once: the USD1 transfers to the cards on chain are
 * the `executed` decisions, one per card, each of the decided amount. Cards and agent wallets are
 * written straight into the database and the devnet's state, as a programme's would already be.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { Context, Effect, Layer, Redacted } from "effect"
import { createPublicClient, erc20Abi, http, parseAbiItem, parseUnits } from "viem"
import { startDevnet } from "../../src/chain/Devnet.js"
import { MULTICALL3_ADDRESS } from "../../src/chain/Multicall.js"
import { sqlLayer } from "../../src/storage/Database.js"
import { fundAgentWallets, seedAgentCards } from "../support/agentCards.js"
import { devnetServiceEnv, startService, stopService } from "../support/process.js"
import { temporaryDatabaseUrl } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const CARDS = 1_000
const SEED = "agent-refills-test-seed-0123456789abcdef"

describe("the agent live at scale", () => {
  it.live(
    `${CARDS} cards below their floor: two replicas refill each exactly once, transfers on chain = executed decisions`,
    () =>
      Effect.gen(function* () {
        const devnet = yield* startDevnet().pipe(Effect.orDie)
        const databaseUrl = yield* temporaryDatabaseUrl
        const env = devnetServiceEnv(devnet, databaseUrl, {
          AGENT_MODE: "live",
          AGENT_WALLET_SEED: SEED,
          AGENT_INTERVAL: "1 hour",
          AGENT_CONCURRENCY: "32",
          // Pages of 100: both replicas take a share of the 1,000 cards.
          AGENT_BATCH: "100"
        })
        const replicas = yield* Effect.all(
          [env, env].map((e) => Effect.flatMap(e, (vars) => startService(vars))),
          { concurrency: "unbounded" }
        )
        yield* Effect.addFinalizer(() =>
          Effect.forEach(replicas, (replica) => stopService(replica, "SIGTERM"), { discard: true })
        )

        // The cards (no spending, $0 on the card: below the $10 floor) and their wallets ($25 of
        // USD1 each), then all due at once.
        const sql = Context.get(yield* Layer.build(sqlLayer(Redacted.make(databaseUrl))), SqlClient.SqlClient)
        yield* seedAgentCards(sql, CARDS, new Date(Date.now() + 86_400_000), { weeklySpendUsd: 0 })
        yield* fundAgentWallets(sql, devnet, SEED, CARDS)
        const cards = (yield* sql<{ address: `0x${string}` }>`SELECT address FROM cards`).map((c) => c.address)
        const started = Date.now()
        yield* sql`UPDATE agent_strategies SET due_at = now()`

        const executed = yield* eventually(
          `${CARDS} executed refills`,
          sql<{ n: number; last: Date | null }>`
            SELECT count(*)::int AS n, max(updated_at) AS last FROM agent_decisions WHERE status = 'executed'`,
          ([row]) => row?.n === CARDS,
          // A thousand transactions on a loaded 2-core machine: minutes (115 s alone, over 4 under a benchmark).
          { atMost: "10 minutes" }
        )
        const seconds = (executed[0]!.last!.getTime() - started) / 1000
        console.log(`agent live refills: ${CARDS} in ${seconds.toFixed(1)} s, ${(CARDS / seconds).toFixed(1)}/s`)

        // Exactly once per card: one executed refill each, by both replicas. A card whose next due
        // instant came while this waited was decided again, for that later interval: in its refill's
        // cooldown (blocked) or, refilled to its floor, with nothing to do (a logged `none`).
        const decisions = yield* sql<{ status: string; action: string; n: number; cards: number; replicas: number }>`
          SELECT status, action, count(*)::int AS n, count(DISTINCT card_id)::int AS cards,
                 count(DISTINCT replica)::int AS replicas
          FROM agent_decisions WHERE status = 'executed' GROUP BY status, action`
        expect(decisions).toEqual([{ status: "executed", action: "refill", n: CARDS, cards: CARDS, replicas: 2 }])
        const [others] = yield* sql<{ n: number }>`
          SELECT count(*)::int AS n FROM agent_decisions d
          WHERE d.status NOT IN ('executed', 'blocked')
            AND NOT (d.status = 'logged' AND d.action = 'none' AND d.due_at > (
              SELECT r.due_at FROM agent_decisions r WHERE r.card_id = d.card_id AND r.status = 'executed'))`
        expect(others).toEqual({ n: 0 })
        const [sends] = yield* sql<{ n: number; succeeded: number }>`
          SELECT count(*)::int AS n, count(*) FILTER (WHERE status = 'succeeded')::int AS succeeded
          FROM agent_transactions WHERE step = 'send'`
        expect(sends).toEqual({ n: CARDS, succeeded: CARDS })

        // On chain: one $10 USD1 transfer to each card, and each card holds exactly that.
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const transfers = yield* Effect.promise(() =>
          client.getLogs({
            address: devnet.usd1,
            event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
            fromBlock: 0n
          })
        )
        const toCards = transfers.filter((log) => cards.includes(log.args.to!.toLowerCase() as `0x${string}`))
        expect(toCards).toHaveLength(CARDS)
        expect(new Set(toCards.map((log) => log.args.to!.toLowerCase())).size).toBe(CARDS)
        expect(toCards.every((log) => log.args.value === parseUnits("10", 18))).toBe(true)
        const balances = yield* Effect.promise(() =>
          client.multicall({
            contracts: cards.map(
              (card) => ({ address: devnet.usd1, abi: erc20Abi, functionName: "balanceOf", args: [card] }) as const
            ),
            allowFailure: false,
            multicallAddress: MULTICALL3_ADDRESS
          })
        )
        expect(balances.every((balance) => balance === parseUnits("10", 18))).toBe(true)
      }).pipe(Effect.scoped, Effect.orDie),
    600_000
  )
})
