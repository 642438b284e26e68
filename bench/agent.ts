/**
 * (f) the agent loop's tick in dry mode for 1, 100 and 1,000 cards on the shared devnet: the time of
 * one full tick (claim, bulk reads, decide, store, move on) and the time per card. The loop runs in
 * this process over the shared database; cards, users and strategies are inserted directly (the
 * benchmark measures the tick, not onboarding). Each size is ticked three times: the first tick
 * stores every card's first decision, the later ones find nothing new to store (idle cards write
 * nothing), which is the steady state of a deployment.
 */
import { randomBytes } from "node:crypto"
import { PgClient } from "@effect/sql-pg"
import { ConfigProvider, Effect, Layer, Redacted } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { AgentLoop } from "../src/agent/AgentLoop.js"
import { Statement } from "../src/cards/Statement.js"
import { Events } from "../src/events/Events.js"
import { Market } from "../src/market/Market.js"
import { portsLayer } from "../src/Ports.js"
import { AppConfig } from "../src/runtime/Config.js"
import { sqlLayer } from "../src/storage/Database.js"
import { type BenchContext, median, type Section, serviceEnv } from "./harness.js"

/** Inserts `count` users, each with a card and a strategy due now, in a few statements. */
const insertCards = (sql: PgClient.PgClient, count: number) =>
  Effect.gen(function* () {
    const now = new Date()
    const cards = Array.from({ length: count }, () => ({
      id: randomBytes(16).toString("hex"),
      address: privateKeyToAccount(generatePrivateKey()).address
    }))
    for (let i = 0; i < cards.length; i += 500) {
      const chunk = cards.slice(i, i + 500)
      yield* sql`INSERT INTO users ${sql.insert(chunk.map((card) => ({ address: card.address, createdAt: now })))}`
      yield* sql`INSERT INTO cards ${sql.insert(
        chunk.map((card) => ({
          id: card.id,
          address: card.address,
          issuer: "bench",
          issuerRef: card.id,
          holder: "Bench Holder",
          numberSealed: new Uint8Array(40),
          cvvSealed: new Uint8Array(40),
          last4: "0000",
          expiry: "01/30",
          documentHash: randomBytes(32),
          createdAt: now
        }))
      )}`
      yield* sql`INSERT INTO agent_strategies ${sql.insert(
        chunk.map((card) => ({
          cardId: card.id,
          targets: sql.json({ NVDA: 0.5, SPY: 0.5 }),
          weeklySpendUsd: 140,
          timeZone: "America/New_York",
          createdAt: now,
          updatedAt: now,
          dueAt: now
        }))
      )}`
    }
  })

const clear = (sql: PgClient.PgClient) =>
  sql`TRUNCATE agent_transactions, agent_decisions, agent_strategies RESTART IDENTITY`.pipe(
    // The decisions' events, and the bench users' event ids with them.
    Effect.zipRight(sql`DELETE FROM events WHERE address IN (SELECT address FROM cards WHERE issuer = 'bench')`),
    Effect.zipRight(
      sql`DELETE FROM event_sequences WHERE address IN (SELECT address FROM cards WHERE issuer = 'bench')`
    ),
    Effect.zipRight(sql`DELETE FROM cards WHERE issuer = 'bench'`),
    Effect.zipRight(sql`DELETE FROM users WHERE NOT EXISTS (SELECT 1 FROM cards WHERE cards.address = users.address)
                        AND NOT EXISTS (SELECT 1 FROM sessions WHERE sessions.address = users.address)`)
  )

/** The agent loop over the shared database and devnet, in dry mode, as a service replica builds it. */
const agentLayer = (ctx: BenchContext) =>
  Layer.unwrapEffect(
    Effect.map(ctx.sharedDevnet, (devnet) => {
      const env = {
        ...serviceEnv(ctx, devnet, "agent-bench"),
        AGENT_MODE: "dry",
        AGENT_BATCH: "500",
        LOG_LEVEL: "Warn"
      }
      return AgentLoop.Default.pipe(
        Layer.provide([Market.Default, Statement.Default, Events.Default]),
        Layer.provide(portsLayer()),
        Layer.provideMerge(sqlLayer(Redacted.make(ctx.databaseUrl))),
        Layer.provide(AppConfig.layer),
        Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
      )
    })
  )

export const agentSection: Section = {
  name: "agent",
  about: "one agent tick in dry mode for 1, 100 and 1,000 cards: time per tick and per card",
  run: (ctx) =>
    Effect.gen(function* () {
      const loop = yield* AgentLoop
      const sql = yield* PgClient.PgClient
      const lines: Array<string> = [
        "agent tick, dry mode (first: every card's first decision stored; steady: the median of two later ticks, nothing new to store)",
        "",
        "| cards | first tick, ms | per card, ms | steady tick, ms | per card, ms |",
        "|---:|---:|---:|---:|---:|"
      ]
      for (const size of ctx.sizes.agentCards) {
        yield* clear(sql)
        yield* insertCards(sql, size)
        const timed = Effect.gen(function* () {
          yield* sql`UPDATE agent_strategies SET due_at = now()`
          const started = performance.now()
          const summary = yield* loop.tick()
          if (summary.claimed !== size) {
            return yield* Effect.fail(new Error(`the tick claimed ${summary.claimed} of ${size} cards`))
          }
          return performance.now() - started
        })
        const first = yield* timed
        const steady = median([yield* timed, yield* timed])
        ctx.progress(`[agent] ${size} cards: first tick ${first.toFixed(0)} ms, steady ${steady.toFixed(0)} ms`)
        lines.push(
          `| ${size.toLocaleString("en-US")} | ${first.toFixed(0)} | ${(first / size).toFixed(2)} | ` +
            `${steady.toFixed(0)} | ${(steady / size).toFixed(2)} |`
        )
      }
      yield* clear(sql)
      return { ratios: [], counts: [], checks: [lines.join("\n")] }
    }).pipe(
      Effect.provide(agentLayer(ctx)),
      Effect.mapError((cause) => new Error(String(cause)))
    )
}
