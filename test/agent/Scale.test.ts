/**
 * The agent loop over thousands of cards: every due card decided once per interval, by one replica
 * or by two sharing the database, in a bounded number of SQL statements counted through the SQL
 * client, and a steady interval writing no card's row; a replica that dies holding a slice or a
 * page of cards loses it to another when its lease ends; a
 * reconciler and a slow executor racing over an unsigned trade never both go ahead (a transfer under a
 * decision failed as unsigned would be refilled again the next interval).
 * Real PostgreSQL; the in-memory chain (the chain is not what these tests measure). Cards are
 * seeded by SQL, as many as a programme has.
 */
import { mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { SqlClient, type Statement as SqlStatement } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Deferred, Effect, Either, Fiber, Layer, Logger, LogLevel, Redacted } from "effect"
import { parseUnits } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { AgentLoop } from "../../src/agent/AgentLoop.js"
import { AgentRepo, type NewDecision } from "../../src/agent/AgentRepo.js"
import { agentWalletKey } from "../../src/agent/ChainAgentWallet.js"
import { phaseOf, sliceCount } from "../../src/agent/Schedule.js"
import { CardDebts } from "../../src/cards/CardDebts.js"
import { Statement } from "../../src/cards/Statement.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { AgentEventsLive, DebtEventsLive, Events } from "../../src/events/Events.js"
import { Market } from "../../src/market/Market.js"
import { portsLayer } from "../../src/Ports.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { DatabasePool } from "../../src/storage/Database.js"
import { clearAgentBench, seedAgentCards, seededCardId } from "../support/agentCards.js"
import { countingSql, SqlCounter } from "../support/SqlCounter.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const CARDS = 2_000
const SEED = "scale-test-seed-0123456789abcdef"
/** The statements a tick may send per 100 due cards (the target of docs/performance.md)... */
const STATEMENTS_PER_100_CARDS = 2
/** ...and per 100 cards whose decisions did not change (measured: 0.45 with the default page of 1,000). */
const STEADY_STATEMENTS_PER_100_CARDS = 1
const LEASE_MS = 2_000
/** Short, so that the intervals the tests tick through are minutes of the same market day. */
const INTERVAL_MS = 60_000
/** Cards per slice (the default page). */
const PAGE = 1_000
const SLICES = sliceCount(CARDS, PAGE)
const PAGES_IN_FLIGHT = 2
/**
 * ...plus what a replica's tick sends whatever its cards: the look for pages to take over, the
 * slicing (a count, its rows) and, per page in flight, one claim of cards due at once and one of a
 * slice that find nothing (two replicas' pages in flight split the cards due at once unevenly: the
 * first interval of the two-replica test sent 38-45 statements for 2,000 cards).
 */
const STATEMENTS_PER_TICK = 3 + 2 * PAGES_IN_FLIGHT

const counter = new SqlCounter()
const chain = InMemoryChain.layer()
const dataDir = mkdtempSync(path.join(tmpdir(), "agent-scale-test-"))
const settings = {
  LOG_LEVEL: "Warn",
  DATA_DIR: dataDir,
  AGENT_MODE: "dry",
  AGENT_INTERVAL: `${INTERVAL_MS} millis`,
  AGENT_LEASE: `${LEASE_MS} millis`,
  AGENT_WALLET_SEED: SEED,
  AGENT_PAGES_IN_FLIGHT: String(PAGES_IN_FLIGHT)
}

const Base = Layer.mergeAll(portsLayer({ chain }), chain, AgentRepo.Default).pipe(
  Layer.provideMerge(countingSql(counter, TestDatabase)),
  Layer.provideMerge(AppConfig.layer),
  Layer.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings))))),
  Layer.merge(
    Layer.scopedDiscard(Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true }))))
  )
)

/** A replica of the loop: its own lease owner, market cache and services, over the shared database and chain. */
const replica = Effect.map(
  Layer.build(
    Layer.fresh(
      AgentLoop.Default.pipe(
        Layer.provide([
          Market.Default,
          Statement.Default,
          CardDebts.Default.pipe(Layer.provide(DebtEventsLive)),
          AgentEventsLive
        ]),
        Layer.provide(Events.Default)
      )
    )
  ),
  (context) => Context.get(context, AgentLoop)
)

const sqlOf = Effect.map(SqlClient.SqlClient, (sql) => ({
  run: <A extends object>(statement: Effect.Effect<ReadonlyArray<A>, unknown>) => Effect.orDie(statement),
  sql
}))

/**
 * The instant `k` intervals after `start`: a tick at it claims every slice for an interval none of
 * the earlier ticks claimed (and past every card's change at `start`).
 */
const intervalsAfter = (start: number, k: number) => start + k * INTERVAL_MS

/** Gives each card's agent wallet $25 of USD1 (and keeps its address): every interval decides a cash refill. */
const fundWallets = (count: number) =>
  Effect.gen(function* () {
    const memory = yield* InMemoryChain
    const { run, sql } = yield* sqlOf
    const wallets = Array.from(
      { length: count },
      (_, i) => privateKeyToAccount(Redacted.value(agentWalletKey(Redacted.make(SEED), seededCardId(i + 1)))).address
    )
    yield* run(sql`
      UPDATE agent_strategies s SET wallet = w.wallet
      FROM (SELECT unnest(${wallets.map((_, i) => seededCardId(i + 1))}::text[]) AS card_id,
                   unnest(${wallets}::text[]) AS wallet) w
      WHERE s.card_id = w.card_id RETURNING s.card_id`)
    yield* Effect.forEach(wallets, (wallet) => memory.mint(memory.usd1.address, wallet, parseUnits("25", 18)), {
      discard: true
    })
  })

const decisionsPerCard = Effect.flatMap(sqlOf, ({ run, sql }) =>
  run(sql<{ cards: number; decisions: number; intervals: number }>`
    SELECT count(DISTINCT card_id)::int AS cards, count(*)::int AS decisions,
           count(DISTINCT (card_id, due_at))::int AS intervals
    FROM agent_decisions`)
).pipe(Effect.map((rows) => rows[0]!))

/** Decisions of the slices (not keyed by a strategy's change at `changedAt`) off their card's grid. */
const offGrid = (changedAt: Date) =>
  Effect.flatMap(sqlOf, ({ run, sql }) =>
    run(sql<{ cardId: string; dueAt: Date }>`
      SELECT card_id, due_at FROM agent_decisions WHERE due_at <> ${changedAt}`)
  ).pipe(
    Effect.map((rows) =>
      rows.filter(({ cardId, dueAt }) => (dueAt.getTime() - phaseOf(cardId, INTERVAL_MS)) % INTERVAL_MS !== 0)
    )
  )

/**
 * The decisions of the cards a killed replica held, in the interval `where` picks: how many, by how
 * many replicas; and how many the killed replica stored.
 */
const takenOver = (held: ReadonlyArray<{ readonly cardId: string }>, where: SqlStatement.Fragment) =>
  Effect.flatMap(sqlOf, ({ run, sql }) =>
    run(sql<{ n: number; replicas: number; killed: number }>`
      SELECT count(*)::int AS n, count(DISTINCT replica)::int AS replicas,
             count(*) FILTER (WHERE replica = 'killed-replica')::int AS killed
      FROM agent_decisions WHERE card_id IN ${sql.in(held.map((card) => card.cardId))} AND ${where}`)
  ).pipe(Effect.map((rows) => rows[0]!))

/**
 * `CARDS` cards set now, each with a funded wallet (a dry-run cash refill every interval), decided
 * once at once by a replica; `next`: an instant of the interval after the next.
 */
const refilledOnce = Effect.gen(function* () {
  yield* reset
  const { sql } = yield* sqlOf
  const repo = yield* AgentRepo
  const seeded = new Date()
  yield* Effect.orDie(seedAgentCards(sql, CARDS, seeded, { weeklySpendUsd: 0 }))
  yield* fundWallets(CARDS)
  const loop = yield* replica
  expect(yield* loop.tick(seeded.getTime())).toMatchObject({ claimed: CARDS, stored: CARDS })
  return { loop, next: intervalsAfter(seeded.getTime(), 2), repo, seeded, sql }
})

const COUNTED_TABLES = ["agent_strategies", "agent_pages", "agent_slices", "agent_decisions", "events"]

/**
 * Until the test ends, every row written to the agent's strategies, pages, slices, decisions and events is counted
 * by a trigger (per table and operation): what a tick writes, exactly.
 */
const countRowWrites = Effect.flatMap(sqlOf, ({ run, sql }) =>
  Effect.gen(function* () {
    yield* run(sql`CREATE TABLE IF NOT EXISTS test_row_writes (tbl text, op text)`)
    yield* run(sql`TRUNCATE test_row_writes`)
    yield* run(sql`
      CREATE OR REPLACE FUNCTION test_count_row_write() RETURNS trigger LANGUAGE plpgsql AS $$
      BEGIN INSERT INTO test_row_writes VALUES (TG_TABLE_NAME, TG_OP); RETURN NULL; END $$`)
    for (const table of COUNTED_TABLES) {
      yield* run(sql`
        CREATE OR REPLACE TRIGGER test_row_writes AFTER INSERT OR UPDATE OR DELETE ON ${sql(table)}
        FOR EACH ROW EXECUTE FUNCTION test_count_row_write()`)
    }
    // Until the test ends: the other tests write without the triggers.
    yield* Effect.addFinalizer(() =>
      Effect.forEach(COUNTED_TABLES, (table) => run(sql`DROP TRIGGER test_row_writes ON ${sql(table)}`), {
        discard: true
      })
    )
  })
)

const rowWrites = Effect.flatMap(sqlOf, ({ run, sql }) =>
  run(sql<{ table: string; op: string; n: number }>`
    SELECT tbl AS table, op, count(*)::int AS n FROM test_row_writes GROUP BY tbl, op ORDER BY tbl, op`)
)

/** Samples the pool's connections in use until read: the most seen at once. */
const busiestPool = Effect.gen(function* () {
  const pool = yield* DatabasePool
  let busiest = 0
  const sample = Effect.map(pool.usage, ({ idle, total }) => {
    busiest = Math.max(busiest, total - idle)
  })
  yield* Effect.forkScoped(Effect.forever(Effect.zipRight(sample, Effect.sleep("5 millis"))))
  return Effect.sync(() => busiest)
})

const reset = Effect.flatMap(sqlOf, ({ sql }) => Effect.orDie(clearAgentBench(sql)))

/** The statements `effect` sends through the SQL client. */
const counted = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const before = counter.count
    const result = yield* effect
    return { result, statements: counter.count - before }
  })

layer(Base, { excludeTestServices: true, timeout: "240 seconds" })("the agent loop at scale", (it) => {
  it.scoped(
    `one replica: a tick over ${CARDS} due cards decides each once in at most ${STATEMENTS_PER_100_CARDS} statements per 100 cards (and ${STATEMENTS_PER_TICK} per tick); the next interval, with nothing changed, writes no card's row, decision or event in at most ${STEADY_STATEMENTS_PER_100_CARDS}`,
    () =>
      Effect.gen(function* () {
        yield* reset
        const { sql } = yield* sqlOf
        const seeded = new Date()
        yield* Effect.orDie(seedAgentCards(sql, CARDS, seeded))
        const loop = yield* replica

        // Every strategy was just set: each card is due at once.
        const first = yield* counted(loop.tick(seeded.getTime()))
        expect(first.result).toMatchObject({ claimed: CARDS, stored: CARDS })
        expect(yield* decisionsPerCard).toEqual({ cards: CARDS, decisions: CARDS, intervals: CARDS })
        expect(first.statements).toBeLessThanOrEqual((CARDS / 100) * STATEMENTS_PER_100_CARDS + STATEMENTS_PER_TICK)

        const [firstEvents] = yield* Effect.orDie(sql<{ n: number }>`SELECT count(*)::int AS n FROM events`)
        expect(firstEvents!.n).toBe(CARDS)
        yield* countRowWrites
        // The next interval: every card due once more, by its slice.
        const steady = yield* counted(loop.tick(intervalsAfter(seeded.getTime(), 2)))
        expect(steady.result).toMatchObject({ claimed: CARDS, stored: 0 })
        expect(yield* decisionsPerCard).toEqual({ cards: CARDS, decisions: CARDS, intervals: CARDS })
        const [events] = yield* Effect.orDie(sql<{ n: number }>`SELECT count(*)::int AS n FROM events`)
        expect(events!.n).toBe(CARDS)
        // Nothing changed: no card's row written, nothing else but each slice's one row (claimed, then done).
        expect(yield* rowWrites).toEqual([{ table: "agent_slices", op: "UPDATE", n: 2 * SLICES }])
        const [slices] = yield* Effect.orDie(sql<{ n: number }>`SELECT count(*)::int AS n FROM agent_slices`)
        expect(slices!.n).toBe(SLICES)
        expect(steady.statements).toBeLessThanOrEqual((CARDS / 100) * STEADY_STATEMENTS_PER_100_CARDS)
        // Another tick at that instant finds nothing due: each slice is done for its window.
        expect(yield* loop.tick(intervalsAfter(seeded.getTime(), 2))).toMatchObject({ claimed: 0 })
      })
  )

  it.scoped("a strategy changed between intervals is decided at once, then with the others in its slice", () =>
    Effect.gen(function* () {
      const { loop, next, repo, seeded, sql } = yield* refilledOnce
      expect(yield* loop.tick(next)).toMatchObject({ claimed: CARDS, stored: CARDS })

      const changed = seededCardId(7)
      yield* repo.upsertStrategy({
        cardId: changed,
        targets: { SPY: 1 },
        weeklySpendUsd: 0,
        timeZone: "America/New_York",
        now: new Date()
      })
      // The same interval again: only the changed card is due, at once.
      expect(yield* loop.tick(next)).toMatchObject({ claimed: 1, stored: 1 })
      const [marks] = yield* Effect.orDie(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM agent_strategies WHERE due_at IS NOT NULL`
      )
      expect(marks!.n).toBe(0)
      // The interval after: every card by its slice, the changed one once like the others.
      expect(yield* loop.tick(intervalsAfter(seeded.getTime(), 3))).toMatchObject({ claimed: CARDS, stored: CARDS })
      const [decided] = yield* Effect.orDie(
        sql<{ n: number }>`SELECT count(*)::int AS n FROM agent_decisions WHERE card_id = ${changed}`
      )
      expect(decided!.n).toBe(4)
      expect(yield* offGrid(seeded)).toEqual([{ cardId: changed, dueAt: expect.any(Date) }])
    })
  )

  it.scoped(`two replicas over ${CARDS} cards for three intervals: every card decided exactly once per interval`, () =>
    Effect.gen(function* () {
      yield* reset
      const { sql } = yield* sqlOf
      const seeded = new Date()
      yield* Effect.orDie(seedAgentCards(sql, CARDS, seeded, { weeklySpendUsd: 0 }))
      yield* fundWallets(CARDS)
      const replicas = [yield* replica, yield* replica]
      const busiest = yield* busiestPool
      // The first interval: every card due at once (its strategy was just set); then by the slices.
      for (const interval of [0, 2, 3]) {
        const { result, statements } = yield* counted(
          Effect.all(
            replicas.map((loop) => loop.tick(intervalsAfter(seeded.getTime(), interval))),
            { concurrency: "unbounded" }
          )
        )
        // Each card is claimed by one replica, and decided (a dry-run cash refill) once.
        expect(result[0]!.claimed + result[1]!.claimed).toBe(CARDS)
        expect(result[0]!.stored + result[1]!.stored).toBe(CARDS)
        expect(statements).toBeLessThanOrEqual((CARDS / 100) * STATEMENTS_PER_100_CARDS + 2 * STATEMENTS_PER_TICK)
      }
      expect(yield* decisionsPerCard).toEqual({ cards: CARDS, decisions: 3 * CARDS, intervals: 3 * CARDS })
      expect(yield* offGrid(seeded)).toEqual([])
      // Each replica's pages hold one connection at a time: the loop never queues for the pool behind
      // itself (on a loaded machine such waits ended in "Failed to acquire connection").
      expect(yield* busiest).toBeLessThanOrEqual(2 * PAGES_IN_FLIGHT)
      const statuses = yield* Effect.orDie(sql<{ status: string; action: string; n: number }>`
          SELECT status, action, count(*)::int AS n FROM agent_decisions GROUP BY status, action`)
      expect(statuses).toEqual([{ status: "dry-run", action: "refill", n: 3 * CARDS }])
    })
  )

  it.scoped("a replica that dies holding a slice of cards: another decides them once its lease ends", () =>
    Effect.gen(function* () {
      const { loop: survivor, next, repo, seeded, sql } = yield* refilledOnce
      // What a replica killed mid-tick leaves: a slice claimed under its lease, nothing decided.
      const slices = yield* repo.prepareSlices({ pageSize: PAGE, dueBy: new Date(next), intervalMs: INTERVAL_MS })
      expect(slices).toBe(SLICES)
      const now = Date.now()
      const { cards: held } = yield* repo.claimSlice({
        owner: "killed-replica",
        slices,
        dueBy: next,
        now: new Date(now),
        leaseUntil: new Date(now + LEASE_MS),
        intervalMs: INTERVAL_MS,
        spreadMs: INTERVAL_MS
      })
      expect(held.length).toBeGreaterThan(0)
      expect((yield* survivor.tick(next)).claimed).toBe(CARDS - held.length)

      yield* eventually(
        "the killed replica's slice to be decided by the survivor",
        Effect.zipRight(survivor.tick(next), decisionsPerCard),
        (decided) => decided.decisions === 2 * CARDS
      )
      // Once per interval: each card once for its strategy's change, once in its slice's window.
      expect(yield* decisionsPerCard).toEqual({ cards: CARDS, decisions: 2 * CARDS, intervals: 2 * CARDS })
      expect(yield* offGrid(seeded)).toEqual([])
      expect(yield* takenOver(held, sql`due_at <> ${seeded}`)).toEqual({ n: held.length, replicas: 1, killed: 0 })
      // Done for this interval: another tick in it claims nothing.
      expect((yield* survivor.tick(next)).claimed).toBe(0)
    })
  )

  it.scoped("a replica that dies holding a page of cards due at once: another decides them once its lease ends", () =>
    Effect.gen(function* () {
      yield* reset
      const { sql } = yield* sqlOf
      const repo = yield* AgentRepo
      const seededDue = new Date()
      yield* Effect.orDie(seedAgentCards(sql, 600, seededDue))
      // What a replica killed mid-tick leaves: a page claimed under its lease, nothing decided.
      const now = Date.now()
      const { cards: held } = yield* repo.claimDue({
        owner: "killed-replica",
        now: new Date(now),
        leaseUntil: new Date(now + LEASE_MS),
        limit: 200
      })
      expect(held).toHaveLength(200)
      const survivor = yield* replica
      const first = yield* survivor.tick(seededDue.getTime())
      expect(first.claimed).toBe(400)

      yield* eventually(
        "the killed replica's cards to be decided by the survivor",
        Effect.zipRight(survivor.tick(seededDue.getTime()), decisionsPerCard),
        (decided) => decided.cards === 600
      )
      // Once: each card for the instant its strategy was set.
      expect(yield* decisionsPerCard).toEqual({ cards: 600, decisions: 600, intervals: 600 })
      const [seeded] = yield* Effect.orDie(sql<{ n: number; cards: number }>`
        SELECT count(*)::int AS n, count(DISTINCT card_id)::int AS cards FROM agent_decisions
        WHERE due_at = ${seededDue}`)
      expect(seeded).toEqual({ n: 600, cards: 600 })
      expect(yield* takenOver(held, sql`due_at = ${seededDue}`)).toEqual({ n: 200, replicas: 1, killed: 0 })
    })
  )
  /** A seeded card's refill, stored as executing, nothing signed yet: what the reconciler finds of a slow executor. */
  const executingRefill = (decidedAt = new Date()) =>
    Effect.gen(function* () {
      yield* reset
      const { sql } = yield* sqlOf
      const repo = yield* AgentRepo
      yield* Effect.orDie(seedAgentCards(sql, 1, new Date()))
      const at = decidedAt
      const row: NewDecision = {
        cardId: seededCardId(1),
        dueAt: at,
        at,
        action: "refill",
        rule: "FLOOR",
        symbol: "USD1",
        buySymbol: null,
        usd: 10,
        needUsd: 10,
        horizon: at,
        spread: null,
        repayMicros: null,
        reason: "below the floor",
        status: "executing",
        error: null,
        replica: "executor"
      }
      const stored = yield* repo.insertDecisions([row], new Date())
      const id = stored.get(seededCardId(1))!.id
      const record = repo.recordTransaction({
        decisionId: id,
        step: "send",
        hash: `0x${"ab".repeat(32)}`,
        raw: "0x02",
        sender: `0x${"cd".repeat(20)}`,
        nonce: 0,
        amount: 10n,
        now: new Date()
      })
      const failUnsigned = repo.finishDecision(
        id,
        "failed",
        "interrupted before its first step was signed",
        new Date(),
        "unsigned"
      )
      return { id, record, failUnsigned }
    })

  it.scoped("a replica that stops gives its claims back: its page and its slice are decided at once", () =>
    Effect.gen(function* () {
      yield* reset
      const { sql } = yield* sqlOf
      const repo = yield* AgentRepo
      const seededDue = new Date()
      yield* Effect.orDie(seedAgentCards(sql, 600, seededDue))
      // A page and a slice held under an hour's lease by a replica that is stopping.
      const now = Date.now()
      const lease = { owner: "stopping-replica", now: new Date(now), leaseUntil: new Date(now + 3_600_000) }
      const { cards: page } = yield* repo.claimDue({ ...lease, limit: 200 })
      expect(page).toHaveLength(200)
      const survivor = yield* replica
      expect((yield* survivor.tick(seededDue.getTime())).claimed).toBe(400)
      const next = intervalsAfter(seededDue.getTime(), 2)
      const slices = yield* repo.prepareSlices({ pageSize: PAGE, dueBy: new Date(next), intervalMs: INTERVAL_MS })
      const { cards: slice } = yield* repo.claimSlice({
        ...lease,
        slices,
        dueBy: next,
        intervalMs: INTERVAL_MS,
        spreadMs: INTERVAL_MS
      })
      expect(slice.length).toBeGreaterThan(0)
      // Its lease has an hour to run: nobody else takes them...
      expect((yield* survivor.tick(seededDue.getTime())).claimed).toBe(0)
      // ...until it stops and gives them back: the next tick decides them.
      yield* repo.releaseClaims("stopping-replica", new Date(Date.now() - LEASE_MS))
      expect((yield* survivor.tick(seededDue.getTime())).claimed).toBe(200)
      expect(yield* takenOver(page, sql`due_at = ${seededDue}`)).toMatchObject({ n: 200, killed: 0 })
      yield* survivor.tick(next)
      const [sliceDecided] = yield* Effect.orDie(sql<{ n: number }>`
        SELECT count(*)::int AS n FROM agent_decisions
        WHERE card_id IN ${sql.in(slice.map((card) => card.cardId))} AND due_at <> ${seededDue}`)
      expect(sliceDecided).toEqual({ n: slice.length })
    })
  )

  it.scoped("a replica that stops leaves its executing trade to the next reconciler at once", () =>
    Effect.gen(function* () {
      const repo = yield* AgentRepo
      const { id } = yield* executingRefill()
      const quiet = () => repo.lockStale({ before: new Date(Date.now() - LEASE_MS / 2), limit: 10 })
      expect(yield* quiet()).toEqual([])
      yield* repo.releaseClaims("executor", new Date(Date.now() - LEASE_MS))
      expect(yield* quiet()).toEqual([{ id }])
    })
  )

  it.scoped("a trade stored late in a long tick is not the reconciler's before its lease ends", () =>
    Effect.gen(function* () {
      const repo = yield* AgentRepo
      // Decided at the start of a tick that has run for longer than the lease.
      yield* executingRefill(new Date(Date.now() - 10 * LEASE_MS))
      const stale = yield* repo.lockStale({ before: new Date(Date.now() - LEASE_MS), limit: 10 })
      expect(stale).toEqual([])
    })
  )

  /** Statements of this database waiting for a row lock. */
  const lockWaiters = Effect.flatMap(sqlOf, ({ run, sql }) =>
    run(sql<{ n: number }>`
      SELECT count(*)::int AS n FROM pg_stat_activity
      WHERE datname = current_database() AND wait_event_type = 'Lock'`)
  ).pipe(Effect.map((rows) => rows[0]!.n))

  const outcome = (id: string) =>
    Effect.flatMap(sqlOf, ({ run, sql }) =>
      run(sql<{ status: string; transactions: number }>`
        SELECT d.status, (SELECT count(*)::int FROM agent_transactions t WHERE t.decision_id = d.id) AS transactions
        FROM agent_decisions d WHERE d.id = ${id}`)
    ).pipe(Effect.map((rows) => rows[0]!))

  it.scoped(
    "a reconciler failing a decision as unsigned while its executor records the first transaction: the record holds and the decision goes on",
    () =>
      Effect.gen(function* () {
        const repo = yield* AgentRepo
        const { id, record, failUnsigned } = yield* executingRefill()
        const recorded = yield* Deferred.make<void>()
        const commit = yield* Deferred.make<void>()
        // The executor's transaction has recorded the send and not committed yet.
        const executor = yield* record.pipe(
          Effect.zipRight(Deferred.succeed(recorded, undefined)),
          Effect.zipRight(Deferred.await(commit)),
          repo.withTransaction,
          Effect.fork
        )
        yield* Deferred.await(recorded)
        const reconciler = yield* failUnsigned.pipe(repo.withTransaction, Effect.fork)
        yield* eventually("the reconciler to wait for the executor's lock on the decision", lockWaiters, (n) => n >= 1)
        yield* Deferred.succeed(commit, undefined)
        yield* Fiber.join(executor)
        expect(yield* Fiber.join(reconciler)).toBe(false)
        expect(yield* outcome(id)).toEqual({ status: "executing", transactions: 1 })
      })
  )

  it.scoped(
    "an executor recording its first transaction while a reconciler fails the decision as unsigned: nothing is recorded, so nothing is broadcast",
    () =>
      Effect.gen(function* () {
        const repo = yield* AgentRepo
        const { id, record, failUnsigned } = yield* executingRefill()
        const failed = yield* Deferred.make<boolean>()
        const commit = yield* Deferred.make<void>()
        // The reconciler's transaction has failed the decision and not committed yet.
        const reconciler = yield* failUnsigned.pipe(
          Effect.tap((done) => Deferred.succeed(failed, done)),
          Effect.zipLeft(Deferred.await(commit)),
          repo.withTransaction,
          Effect.fork
        )
        expect(yield* Deferred.await(failed)).toBe(true)
        const executor = yield* record.pipe(Effect.either, Effect.fork)
        yield* eventually("the executor to wait for the reconciler's lock on the decision", lockWaiters, (n) => n >= 1)
        yield* Deferred.succeed(commit, undefined)
        expect(yield* Fiber.join(reconciler)).toBe(true)
        const recordedOrNot = yield* Fiber.join(executor)
        expect(Either.isLeft(recordedOrNot) && recordedOrNot.left._tag).toBe("DecisionTaken")
        expect(yield* outcome(id)).toEqual({ status: "failed", transactions: 0 })
      })
  )

  it.scoped("a decision whose executor got no further than the exchange's approval is failed as unsigned", () =>
    Effect.gen(function* () {
      const repo = yield* AgentRepo
      const { id, failUnsigned } = yield* executingRefill()
      // An approval moves no money: with no step recorded the trade never started.
      yield* repo.recordTransaction({
        decisionId: id,
        step: "approve",
        hash: `0x${"ef".repeat(32)}`,
        raw: "0x02",
        sender: `0x${"cd".repeat(20)}`,
        nonce: 0,
        amount: 10n,
        now: new Date()
      })
      expect(yield* failUnsigned.pipe(repo.withTransaction)).toBe(true)
      expect(yield* outcome(id)).toEqual({ status: "failed", transactions: 1 })
    })
  )
})
