/**
 * SQL for the agent: strategies, their schedule (claimed by pages), the decision log and the
 * trades' journal. Infrastructure failures die here.
 *
 * One repository although long (issue 21): its statements lock and guard the same rows across
 * those tables inside one transaction (`withTransaction`): a decision is stored with its events,
 * finished only while none of its steps is recorded, and a step recorded only while its decision
 * is executing; apart, each half would have to know the other's locking order.
 */
import { SqlClient, SqlSchema, type Statement as SqlStatement } from "@effect/sql"
import { Effect, Schema } from "effect"
import type { ParseError } from "effect/ParseResult"
import { Address } from "../chain/Address.js"
import { isUniqueViolation, repository, transactionally } from "../storage/Sql.js"
import { DecisionAction, DecisionItem, DecisionStatus } from "./Api.js"
import { hashOf, sliceCount } from "./Schedule.js"

export const StrategyRow = Schema.Struct({
  cardId: Schema.String,
  targets: Schema.Record({ key: Schema.String, value: Schema.Number }),
  weeklySpendUsd: Schema.Number,
  timeZone: Schema.String,
  createdAt: Schema.DateFromSelf,
  updatedAt: Schema.DateFromSelf
})
export type StrategyRow = typeof StrategyRow.Type

/** A stored decision is the API's item with its time still a Date. */
const DecisionRow = Schema.Struct({ ...DecisionItem.fields, at: Schema.DateFromSelf })

/** A decision just stored, with its card. */
const StoredDecision = Schema.Struct({ cardId: Schema.String, ...DecisionRow.fields }).pipe(Schema.omit("txs"))

/** A decision as `GET /agent/decisions` answers it. */
export const decisionItem = (row: typeof DecisionRow.Type) => ({ ...row, at: row.at.getTime() })

const strategyColumns = "card_id, targets, weekly_spend_usd, time_zone, created_at, updated_at"

/**
 * An address as the service wrote it into the database (checksummed on the way in): a page of
 * cards is not checksummed again, which would cost a keccak hash per address and per tick.
 */
const StoredAddress = Schema.TemplateLiteral("0x", Schema.String)

/** A card the loop claimed for one interval, with what deciding it needs. */
export const ClaimedCard = Schema.Struct({
  cardId: Schema.String,
  address: StoredAddress,
  cardCreatedAt: Schema.DateFromSelf,
  dueAt: Schema.DateFromSelf,
  targets: Schema.Record({ key: Schema.String, value: Schema.Number }),
  weeklySpendUsd: Schema.Number,
  timeZone: Schema.String,
  tradeAfter: Schema.NullOr(Schema.DateFromSelf),
  /** The agent wallet's address once the loop derived it. */
  wallet: Schema.NullOr(StoredAddress)
})
export type ClaimedCard = typeof ClaimedCard.Type

/** A slice claimed for its window (`Schedule.sliceWindow`). */
export interface SliceClaim {
  readonly slices: number
  readonly slice: number
  readonly opensAt: Date
}

/** A slice claimed with its cards due in the window; none left to claim: `slice` is null. */
export interface ClaimedSlice {
  readonly slice: SliceClaim | null
  readonly cards: ReadonlyArray<ClaimedCard>
}

/** What the loop stores of a decision. */
export interface NewDecision {
  readonly cardId: string
  readonly dueAt: Date
  readonly at: Date
  readonly action: typeof DecisionAction.Type
  readonly rule: string
  readonly symbol: string | null
  readonly buySymbol: string | null
  readonly usd: number | null
  readonly needUsd: number
  readonly horizon: Date
  readonly spread: number | null
  /** The part of a refill that repays what the card owes, millionths of a dollar; null when nothing is owed. */
  readonly repayMicros: bigint | null
  readonly reason: string
  readonly status: typeof DecisionStatus.Type
  readonly error: string | null
  readonly replica: string
}

/** A decision being executed, as the executor and the reconciler continue it. */
export const ExecutingDecision = Schema.Struct({
  id: Schema.String,
  cardId: Schema.String,
  address: Address,
  action: DecisionAction,
  symbol: Schema.NullOr(Schema.String),
  buySymbol: Schema.NullOr(Schema.String),
  usd: Schema.Number,
  repayMicros: Schema.NullOr(Schema.BigInt),
  updatedAt: Schema.DateFromSelf
})
export type ExecutingDecision = typeof ExecutingDecision.Type

/** The statuses an executing decision ends in. */
export type FinishedStatus = "executed" | "failed" | "unknown" | "blocked"

/** `unsigned`: only while none of the decision's steps is recorded (the reconciler's "nothing signed"). */
export type FinishGuard = "unsigned" | "any"

/**
 * A trade's transactions: the steps (a refill's repayment of what the card owes among them), and the
 * exchange's approval a wallet's first trade of a token needs before them.
 */
export const TransactionStep = Schema.Literal("approve", "sell", "buy", "repay", "send")
export type TransactionStep = typeof TransactionStep.Type

export const AgentTransaction = Schema.Struct({
  step: TransactionStep,
  hash: Schema.String,
  raw: Schema.String,
  amount: Schema.BigInt,
  status: Schema.Literal("broadcast", "succeeded", "failed"),
  createdAt: Schema.DateFromSelf
})
export type AgentTransaction = typeof AgentTransaction.Type

/** A succeeded agent transaction the tracker follows until it is final. */
export const TrackedTransaction = Schema.Struct({
  decisionId: Schema.String,
  step: TransactionStep,
  hash: Schema.String,
  raw: Schema.String,
  sender: StoredAddress,
  nonce: Schema.NumberFromString,
  finality: Schema.Literal("pending", "mined"),
  blockHash: Schema.NullOr(Schema.String),
  action: DecisionAction,
  cardId: Schema.String
})
export type TrackedTransaction = typeof TrackedTransaction.Type

/** The decision is no longer this executor's to continue (finished, or taken over). */
export class DecisionTaken extends Schema.TaggedError<DecisionTaken>()("DecisionTaken", {}) {}

/**
 * `Schedule.phaseOfHash` in SQL: the phase, ms, of a hash in [0, 2^32] over a spread,
 * floor(hash × spread / 2^32). In numeric, exact for any interval (a bigint product overflows once
 * the spread passes 2^31 ms, 24.8 days). If the two drifted apart, cards would be decided twice or
 * never: test/agent/ScheduleSql.test.ts runs both over random hashes and spreads, 2^32's boundaries
 * included, and requires them equal.
 */
export const phaseSql = (sql: SqlClient.SqlClient, hash: SqlStatement.Fragment, spreadMs: number) =>
  sql`div((${hash})::numeric * ${spreadMs}, 4294967296)::bigint`

/**
 * `Schedule.sliceWindow` in SQL for every slice of `slices`: one row per slice with its hashes
 * [from_hash, to_hash), its window's `opens` and `closes` (phases, ms) and the interval's `base`
 * (ms since the epoch) of the last window that closed by `dueBy`. Checked against the TypeScript in
 * test/agent/ScheduleSql.test.ts.
 */
export const sliceWindowsSql = (
  sql: SqlClient.SqlClient,
  window: { readonly slices: number; readonly dueBy: number; readonly interval: number; readonly spread: number }
) => sql`
  SELECT slice, hashes.from_hash, hashes.to_hash, phases.opens, phases.closes,
         (${window.dueBy}::bigint - phases.closes) / ${window.interval} * ${window.interval} AS base
  FROM generate_series(0, ${window.slices - 1}) slice
  CROSS JOIN LATERAL (SELECT (slice::bigint << 32) / ${window.slices} AS from_hash,
                             ((slice::bigint + 1) << 32) / ${window.slices} AS to_hash) hashes
  CROSS JOIN LATERAL (SELECT ${phaseSql(sql, sql`hashes.from_hash`, window.spread)} AS opens,
                             ${phaseSql(sql, sql`hashes.to_hash`, window.spread)} AS closes) phases`

export class AgentRepo extends Effect.Service<AgentRepo>()("app/AgentRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const columns = sql.literal(strategyColumns)

    /** Stores the card's strategy, replacing an earlier one; a new strategy is due at once. */
    const upsertStrategy = SqlSchema.single({
      Request: Schema.Struct({
        cardId: Schema.String,
        targets: Schema.Record({ key: Schema.String, value: Schema.Number }),
        weeklySpendUsd: Schema.Number,
        timeZone: Schema.String,
        now: Schema.DateFromSelf
      }),
      Result: StrategyRow,
      execute: ({ cardId, now, targets, timeZone, weeklySpendUsd }) => sql`
        INSERT INTO agent_strategies (card_id, targets, weekly_spend_usd, time_zone, created_at, updated_at, due_at,
                                      due_hash)
        VALUES (${cardId}, ${JSON.stringify(targets)}::jsonb, ${weeklySpendUsd}, ${timeZone}, ${now}, ${now}, ${now},
                ${hashOf(cardId)})
        ON CONFLICT (card_id) DO UPDATE SET
          targets = EXCLUDED.targets,
          weekly_spend_usd = EXCLUDED.weekly_spend_usd,
          time_zone = EXCLUDED.time_zone,
          updated_at = EXCLUDED.updated_at,
          due_at = LEAST(agent_strategies.due_at, EXCLUDED.due_at)
        RETURNING ${columns}`
    })

    const findStrategy = SqlSchema.findOne({
      Request: Schema.String,
      Result: StrategyRow,
      execute: (cardId) => sql`SELECT ${columns} FROM agent_strategies WHERE card_id = ${cardId}`
    })

    /** Takes the card's one-time funding; false when it was taken before (by any replica). */
    const claimFunding = (cardId: string, now: Date) =>
      sql`UPDATE agent_strategies SET funded_at = ${now} WHERE card_id = ${cardId} AND funded_at IS NULL
          RETURNING card_id`.pipe(Effect.map((rows) => rows.length === 1))

    /** Gives the funding back after it failed, so that the next strategy update tries again. */
    const releaseFunding = (cardId: string) =>
      sql`UPDATE agent_strategies SET funded_at = NULL WHERE card_id = ${cardId}`

    /** Decisions as the log shows them (`where` over decisions `d`), with their transactions in signing order. */
    const decisionRows = (where: SqlStatement.Fragment) => sql`
      SELECT d.id, d.at, d.action, d.symbol, d.usd, d.reason, d.status, d.error,
             COALESCE(array_agg(t.hash ORDER BY t.created_at) FILTER (WHERE t.hash IS NOT NULL), '{}') AS txs
      FROM agent_decisions d LEFT JOIN agent_transactions t ON t.decision_id = d.id
      WHERE ${where}
      GROUP BY d.id`

    /** The card's decisions, newest first. */
    const decisions = SqlSchema.findAll({
      Request: Schema.Struct({ cardId: Schema.String, limit: Schema.Number, before: Schema.NullOr(Schema.String) }),
      Result: DecisionRow,
      execute: ({ before, cardId, limit }) => sql`
        ${decisionRows(sql`d.card_id = ${cardId} AND (${before}::bigint IS NULL OR d.id < ${before}::bigint)`)}
        ORDER BY d.id DESC
        LIMIT ${limit}`
    })

    /** The given decisions, each with the address of its card's holder. */
    const decisionsById = SqlSchema.findAll({
      Request: Schema.Array(Schema.String),
      Result: Schema.Struct({ ...DecisionRow.fields, address: Address }),
      execute: (ids) => sql`
        SELECT r.*, c.address FROM (${decisionRows(sql`d.id = ANY(${ids}::bigint[])`)}) r
        JOIN agent_decisions d ON d.id = r.id::bigint JOIN cards c ON c.id = d.card_id
        ORDER BY r.id::bigint`
    })

    /** A claimed card with what deciding it needs: `card` is the claimed row, looked up by key in `cards`. */
    const claimedColumns = (card: string) =>
      sql.literal(`
      ${card}.card_id, c.address, c.created_at AS card_created_at, ${card}.due_at, ${card}.targets,
      ${card}.weekly_spend_usd, ${card}.time_zone, ${card}.trade_after, ${card}.wallet
      FROM ${card}
      -- Each card looked up by its key: a plain join made PostgreSQL hash the whole cards table
      -- for every page (114 ms of a 140 ms claim at 100,000 cards).
      CROSS JOIN LATERAL (SELECT address, created_at FROM cards WHERE id = ${card}.card_id LIMIT 1) c`)

    const decodeClaimed = Schema.decodeUnknown(Schema.Array(ClaimedCard))
    /** A page's id and its cards, from rows of claimed cards that each carry their page's id. */
    const claimedPage = (rows: ReadonlyArray<{ readonly page?: unknown }>) =>
      Effect.map(decodeClaimed(rows), (cards) => ({
        page: rows.length === 0 ? null : String(rows[0]!.page),
        cards
      }))

    /**
     * Claims a page of up to `limit` cards marked due by `now` (their strategy was just set or
     * changed; other replicas skip them: SKIP LOCKED), clears their mark and records the page
     * under this replica's lease, in one statement. The cards come back with the instant they
     * were marked at: the key of that decision. Every other decision comes from the slices.
     */
    const claimDue = (request: {
      readonly owner: string
      readonly now: Date
      readonly leaseUntil: Date
      readonly limit: number
    }) =>
      sql`
        WITH due AS (
          SELECT card_id, due_at FROM agent_strategies WHERE due_at <= ${request.now}
          ORDER BY due_at LIMIT ${request.limit}
          FOR UPDATE SKIP LOCKED
        ), claimed AS (
          UPDATE agent_strategies s SET due_at = NULL
          FROM due WHERE s.card_id = due.card_id
          RETURNING s.card_id, due.due_at, s.targets, s.weekly_spend_usd, s.time_zone, s.trade_after, s.wallet
        ), page AS (
          INSERT INTO agent_pages (owner, lease_until, card_ids, due_ats)
          SELECT ${request.owner}, ${request.leaseUntil}, array_agg(card_id), array_agg(due_at) FROM claimed
          HAVING count(*) > 0
          RETURNING id
        )
        SELECT (SELECT id FROM page) AS page, ${claimedColumns("claimed")}`.pipe(Effect.flatMap(claimedPage))

    /**
     * The number of cards cut into slices of about `pageSize` (`Schedule.sliceCount`), and that
     * slicing's rows, created when missing (never claimed yet: their window is before any).
     * Rows of another slicing unused for two intervals (the number of cards doubled or halved)
     * are deleted. Writes nothing while the slicing stays the same.
     */
    const prepareSlices = (request: { readonly pageSize: number; readonly dueBy: Date; readonly intervalMs: number }) =>
      Effect.gen(function* () {
        const [count] = yield* sql<{ cards: number }>`SELECT count(*)::int AS cards FROM agent_strategies`
        const slices = sliceCount(count!.cards, request.pageSize)
        yield* sql`
          WITH stale AS (
            DELETE FROM agent_slices WHERE slices <> ${slices}
              AND opens_at < ${request.dueBy}::timestamptz - 2 * ${Math.floor(request.intervalMs)} * interval '1 millisecond'
          )
          INSERT INTO agent_slices (slices, slice, opens_at, owner, lease_until, done)
          SELECT ${slices}, slice, '-infinity', '', '-infinity', true FROM generate_series(0, ${slices - 1}) slice
          ON CONFLICT DO NOTHING`
        return slices
      })

    const decodeSlice = Schema.decodeUnknown(Schema.Struct({ slice: Schema.Number, opensAt: Schema.DateFromSelf }))

    /**
     * Claims one slice of `slices` whose window closed by `dueBy` (`Schedule.sliceWindow`) and
     * that nobody claimed for that window, or whose claim's lease ended before `now` unfinished (its
     * replica died or hung): the slice is this replica's until `leaseUntil`. Other replicas skip a
     * slice being claimed (SKIP LOCKED). In the same statement its cards are read by their hash
     * range, each with its due time in the window: no card's row is written (a slice without any is
     * done at once). Left out: cards marked
     * due at once (`claimDue` takes them), and cards whose strategy changed at or after their due
     * time in the window (decided when it changed, they are due again next interval). A slicing
     * only the last interval before `dueBy` is claimed, however far behind the loop fell. None:
     * `slice` is null.
     */
    const claimSlice = (request: {
      readonly owner: string
      readonly slices: number
      readonly dueBy: number
      readonly now: Date
      readonly leaseUntil: Date
      readonly intervalMs: number
      readonly spreadMs: number
    }) => {
      const interval = Math.floor(request.intervalMs)
      const spread = Math.floor(Math.min(request.spreadMs, request.intervalMs))
      const instant = (ms: SqlStatement.Fragment) => sql`'epoch'::timestamptz + (${ms}) * interval '1 millisecond'`
      /** The cards `s` of the slice `window` (its hashes and interval), each with its due time in it, and `joined`. */
      const members = (window: string, joined: SqlStatement.Fragment = sql``) => sql`
        FROM agent_strategies s
        CROSS JOIN LATERAL (SELECT ${instant(sql`${sql.literal(window)}.base + ${phaseSql(sql, sql`s.due_hash`, spread)}`)} AS due_at) due
        ${joined}
        WHERE s.due_hash >= ${sql.literal(window)}.from_hash AND s.due_hash < ${sql.literal(window)}.to_hash
          AND s.due_at IS NULL AND s.updated_at < due.due_at`
      return sql`
        WITH windows AS (${sliceWindowsSql(sql, { slices: request.slices, dueBy: request.dueBy, interval, spread })}), open AS (
          SELECT r.slice, ${instant(sql`w.base + w.opens`)} AS opens_at, w.from_hash, w.to_hash, w.base
          FROM agent_slices r JOIN windows w ON w.slice = r.slice
          WHERE r.slices = ${request.slices}
            AND (r.opens_at < ${instant(sql`w.base + w.opens`)}
                 OR (r.opens_at = ${instant(sql`w.base + w.opens`)} AND NOT r.done AND r.lease_until < ${request.now}))
          ORDER BY w.base + w.opens, r.slice
          LIMIT 1
          FOR UPDATE OF r SKIP LOCKED
        ), claimed AS (
          UPDATE agent_slices r
          SET opens_at = open.opens_at, owner = ${request.owner}, lease_until = ${request.leaseUntil},
              -- A slice with no card due in its window is done at once.
              done = NOT EXISTS (SELECT 1 ${members("open")})
          FROM open WHERE r.slices = ${request.slices} AND r.slice = open.slice
          RETURNING open.*
        )
        SELECT claimed.slice, claimed.opens_at, card.*
        FROM claimed LEFT JOIN LATERAL (
          SELECT s.card_id, c.address, c.created_at AS card_created_at, due.due_at, s.targets, s.weekly_spend_usd,
                 s.time_zone, s.trade_after, s.wallet
          ${members(
            "claimed",
            // Each card looked up by its key (see claimedColumns).
            sql`CROSS JOIN LATERAL (SELECT address, created_at FROM cards WHERE id = s.card_id LIMIT 1) c`
          )}
        ) card ON true`.pipe(
        Effect.flatMap(
          (rows): Effect.Effect<ClaimedSlice, ParseError> =>
            rows.length === 0
              ? Effect.succeed({ slice: null, cards: [] })
              : Effect.all({
                  slice: Effect.map(decodeSlice(rows[0]), (slice) => ({ slices: request.slices, ...slice })),
                  // An empty slice is its one row without a card.
                  cards: decodeClaimed(rows.filter((row) => row.cardId !== null))
                })
        )
      )
    }

    /**
     * Takes over one page whose owner's lease ended before `now` (the replica died or hung): the
     * page is this replica's until `leaseUntil`, its cards come back with the interval each was
     * claimed for (a card whose strategy is gone is left out). None: `page` is null.
     */
    const takeOverPage = (request: { readonly owner: string; readonly now: Date; readonly leaseUntil: Date }) =>
      Effect.gen(function* () {
        const [page] = yield* sql<{ id: string; cardIds: ReadonlyArray<string>; dueAts: ReadonlyArray<Date> }>`
          UPDATE agent_pages SET owner = ${request.owner}, lease_until = ${request.leaseUntil}
          WHERE id = (SELECT id FROM agent_pages WHERE lease_until < ${request.now}
                      ORDER BY lease_until LIMIT 1 FOR UPDATE SKIP LOCKED)
          RETURNING id, card_ids, due_ats`
        if (page === undefined) return { page: null, cards: [] }
        const cards = yield* sql`
          WITH taken AS (
            SELECT s.card_id, taken.due_at, s.targets, s.weekly_spend_usd, s.time_zone, s.trade_after, s.wallet
            FROM unnest(${page.cardIds}::text[], ${page.dueAts.map((at) => at.toISOString())}::timestamptz[])
                 AS taken (card_id, due_at)
            JOIN agent_strategies s ON s.card_id = taken.card_id
          )
          SELECT ${claimedColumns("taken")}`.pipe(Effect.flatMap(decodeClaimed))
        return { page: String(page.id), cards }
      })

    /** Runs `done` and keeps the wallet addresses derived for the cards decided (their first look). */
    const keepingWallets = (
      done: SqlStatement.Statement<unknown>,
      wallets: ReadonlyArray<{ readonly cardId: string; readonly wallet: string }>
    ) =>
      wallets.length === 0
        ? done.pipe(Effect.asVoid)
        : sql`
            WITH done AS (${done})
            UPDATE agent_strategies s SET wallet = COALESCE(s.wallet, kept.wallet)
            FROM (SELECT unnest(${wallets.map((w) => w.cardId)}::text[]) AS card_id,
                         unnest(${wallets.map((w) => w.wallet)}::text[]) AS wallet) kept
            WHERE s.card_id = kept.card_id`.pipe(Effect.asVoid)

    /**
     * The page's decisions are stored: its lease ends (unless another replica took the page over
     * meanwhile) and the wallet addresses derived for its cards are kept.
     */
    const finishPage = (
      page: string,
      owner: string,
      wallets: ReadonlyArray<{ readonly cardId: string; readonly wallet: string }>
    ) => keepingWallets(sql`DELETE FROM agent_pages WHERE id = ${page} AND owner = ${owner}`, wallets)

    /**
     * The replica `owner` stops: its unfinished pages and slices are anyone's at once (their leases
     * end), and the trades it was executing look as quiet as `quietSince` (a lease ago), so that the
     * next reconciler continues them instead of waiting. Only once its loop was interrupted: nothing
     * of it works on them any more.
     */
    const releaseClaims = (owner: string, quietSince: Date) =>
      sql`
        WITH pages AS (
          UPDATE agent_pages SET lease_until = '-infinity' WHERE owner = ${owner}
        ), slices AS (
          UPDATE agent_slices SET lease_until = '-infinity' WHERE owner = ${owner} AND NOT done
        )
        UPDATE agent_decisions SET updated_at = LEAST(updated_at, ${quietSince})
        WHERE status = 'executing' AND replica = ${owner}`

    /** The slice's decisions are stored: done for its window (unless another replica took it over meanwhile). */
    const finishSlice = (
      slice: SliceClaim,
      owner: string,
      wallets: ReadonlyArray<{ readonly cardId: string; readonly wallet: string }>
    ) =>
      keepingWallets(
        sql`UPDATE agent_slices SET done = true
            WHERE slices = ${slice.slices} AND slice = ${slice.slice} AND opens_at = ${slice.opensAt}
              AND owner = ${owner}`,
        wallets
      )

    /** Each card's latest decision: what an idle decision is compared with before it is written. */
    const latestDecisions = SqlSchema.findAll({
      Request: Schema.Array(Schema.String),
      Result: Schema.Struct({
        cardId: Schema.String,
        action: DecisionAction,
        symbol: Schema.NullOr(Schema.String),
        rule: Schema.String,
        status: DecisionStatus,
        /** The card's cooldown as it stands with this decision (an executed refill writes both at once). */
        tradeAfter: Schema.NullOr(Schema.DateFromSelf),
        /**
         * Repayments sent and not yet seen mined or reverted, atomic units: what the card owes less
         * these is what a new decision may repay (one in doubt may still be mined: never pay twice).
         */
        repaying: Schema.BigInt
      }),
      execute: (cardIds) => sql`
        SELECT s.card_id, d.action, d.symbol, d.rule, d.status, s.trade_after,
               coalesce((SELECT sum(t.amount) FROM agent_transactions t
                         JOIN agent_decisions r ON r.id = t.decision_id AND r.card_id = s.card_id
                         WHERE t.step = 'repay' AND t.status = 'broadcast'), 0) AS repaying
        FROM agent_strategies s
        -- The newest decision by the (card_id, id DESC) index, card by card: a DISTINCT ON over the
        -- cards' decisions read the whole decision log for every page.
        CROSS JOIN LATERAL (
          SELECT action, symbol, rule, status FROM agent_decisions
          WHERE card_id = s.card_id ORDER BY id DESC LIMIT 1
        ) d
        WHERE s.card_id = ANY(${cardIds}::text[])`
    })

    /**
     * Stores a batch of decisions in one statement. (card, interval) is unique: a decision another
     * replica already stored for that interval is skipped. Answers the stored ones by card, as the
     * log shows them (a new decision has no transaction yet).
     */
    const insertDecisions = (rows: ReadonlyArray<NewDecision>, storedAt: Date) =>
      rows.length === 0
        ? Effect.succeed(new Map<string, typeof DecisionRow.Type>())
        : sql`
            INSERT INTO agent_decisions ${sql.insert(
              // Stamped when stored, not when decided (the tick's start): a page stored late in a long
              // tick must not look abandoned to the reconciler before its executor has signed anything.
              rows.map((row) => ({
                ...row,
                repayMicros: row.repayMicros?.toString() ?? null,
                createdAt: storedAt,
                updatedAt: storedAt
              }))
            )}
            ON CONFLICT (card_id, due_at) DO NOTHING
            RETURNING card_id, id, at, action, symbol, usd, reason, status, error`.pipe(
            Effect.flatMap(Schema.decodeUnknown(Schema.Array(StoredDecision))),
            Effect.map((stored) => new Map(stored.map(({ cardId, ...row }) => [cardId, { ...row, txs: [] }])))
          )

    const setTradeAfter = (cardId: string, until: Date) =>
      sql`UPDATE agent_strategies SET trade_after = GREATEST(trade_after, ${until}) WHERE card_id = ${cardId}`

    const findExecuting = SqlSchema.findOne({
      Request: Schema.String,
      Result: ExecutingDecision,
      execute: (id) => sql`
        SELECT d.id, d.card_id, c.address, d.action, d.symbol, d.buy_symbol, d.usd, d.repay_micros, d.updated_at
        FROM agent_decisions d JOIN cards c ON c.id = d.card_id
        WHERE d.id = ${id} AND d.status = 'executing'`
    })

    /** Executing decisions untouched since `before` (their executor is gone), locked for this replica. */
    const lockStale = SqlSchema.findAll({
      Request: Schema.Struct({ before: Schema.DateFromSelf, limit: Schema.Number }),
      Result: Schema.Struct({ id: Schema.String }),
      execute: ({ before, limit }) => sql`
        SELECT id FROM agent_decisions WHERE status = 'executing' AND updated_at < ${before}
        ORDER BY updated_at LIMIT ${limit} FOR UPDATE SKIP LOCKED`
    })

    /** Marks the decision as worked on now (the reconciler leaves it alone meanwhile). */
    const touch = (id: string, now: Date) =>
      sql`UPDATE agent_decisions SET updated_at = ${now} WHERE id = ${id} AND status = 'executing' RETURNING id`.pipe(
        Effect.map((rows) => rows.length === 1)
      )

    const transactions = SqlSchema.findAll({
      Request: Schema.String,
      Result: AgentTransaction,
      execute: (decisionId) => sql`
        SELECT step, hash, raw, amount, status, created_at FROM agent_transactions
        WHERE decision_id = ${decisionId} ORDER BY created_at`
    })

    /**
     * Records a signed transaction of an executing decision before it is broadcast. Fails with
     * `DecisionTaken` when the decision is no longer executing or the step was recorded already
     * (by a reconciler): then the transaction must not go out.
     */
    const recordTransaction = (row: {
      readonly decisionId: string
      readonly step: TransactionStep
      readonly hash: string
      readonly raw: string
      readonly sender: string
      readonly nonce: number
      readonly amount: bigint
      readonly now: Date
    }) =>
      sql<{ decisionId: string }>`
        INSERT INTO agent_transactions (decision_id, step, hash, raw, sender, nonce, amount, status, finality,
                                        created_at, updated_at, checked_at)
        SELECT ${row.decisionId}, ${row.step}, ${row.hash}, ${row.raw}, ${row.sender}, ${row.nonce},
               ${row.amount.toString()}, 'broadcast', 'pending', ${row.now}, ${row.now}, ${row.now}
        -- The decision's row lock orders this against a reconciler failing the decision as unsigned
        -- (finishDecision's "unsigned" guard): one of the two sees the other's outcome, never neither.
        WHERE EXISTS (SELECT 1 FROM agent_decisions WHERE id = ${row.decisionId} AND status = 'executing' FOR UPDATE)
        RETURNING decision_id`.pipe(
        Effect.catchIf(
          (error) => isUniqueViolation(error, "agent_transactions_pkey"),
          () => Effect.succeed([])
        ),
        Effect.flatMap((rows) => (rows.length === 1 ? Effect.void : Effect.fail(new DecisionTaken())))
      )

    /** The decision's repayment, once mined: its card, transaction and amount (USD1 atomic units). */
    const repayment = SqlSchema.findOne({
      Request: Schema.String,
      Result: Schema.Struct({ cardId: Schema.String, hash: Schema.String, amount: Schema.BigInt }),
      execute: (decisionId) => sql`
        SELECT d.card_id, t.hash, t.amount FROM agent_transactions t JOIN agent_decisions d ON d.id = t.decision_id
        WHERE t.decision_id = ${decisionId} AND t.step = 'repay' AND t.status = 'succeeded'`
    })

    /**
     * Repayments whose decision ended (unknown: not mined in time) before they were seen mined or
     * reverted: the chain may still mine them, and then they must be recorded.
     */
    const repaymentsInDoubt = SqlSchema.findAll({
      Request: Schema.Number,
      Result: Schema.Struct({ decisionId: Schema.String, hash: Schema.String, raw: Schema.String }),
      execute: (limit) => sql`
        SELECT t.decision_id, t.hash, t.raw FROM agent_transactions t JOIN agent_decisions d ON d.id = t.decision_id
        WHERE t.step = 'repay' AND t.status = 'broadcast' AND d.status <> 'executing'
        ORDER BY t.created_at LIMIT ${limit}`
    })

    /**
     * The outcome of a step's transaction: succeeded in a block (`mined`: the tracker follows it to
     * finality), or reverted (nothing moved: never looked at again).
     */
    const finishTransaction = (
      decisionId: string,
      step: TransactionStep,
      outcome:
        | { readonly status: "succeeded"; readonly blockNumber: bigint; readonly blockHash: string }
        | {
            readonly status: "failed"
          },
      now: Date
    ) =>
      outcome.status === "succeeded"
        ? // Seen by the tracker already (or recorded before finality was followed): its finality stays.
          sql`UPDATE agent_transactions SET status = 'succeeded', updated_at = ${now},
                finality = CASE WHEN finality = 'pending' THEN 'mined' ELSE finality END,
                block_number = CASE WHEN finality = 'pending' THEN ${outcome.blockNumber.toString()}::bigint
                                    ELSE block_number END,
                block_hash = CASE WHEN finality = 'pending' THEN ${outcome.blockHash} ELSE block_hash END
              WHERE decision_id = ${decisionId} AND step = ${step}`
        : sql`UPDATE agent_transactions SET status = 'failed', updated_at = ${now}, finality = 'final'
              WHERE decision_id = ${decisionId} AND step = ${step}`

    /**
     * Succeeded transactions not final yet, least recently checked first: what the tracker checks.
     * No lock is taken: a check is a read of the chain, and what it writes is conditional.
     */
    const unfinalTransactions = SqlSchema.findAll({
      Request: Schema.Number,
      Result: TrackedTransaction,
      execute: (limit) => sql`
        SELECT t.decision_id, t.step, t.hash, t.raw, t.sender, t.nonce, t.finality, t.block_hash,
               d.action, d.card_id
        FROM agent_transactions t JOIN agent_decisions d ON d.id = t.decision_id
        WHERE t.finality IN ('pending', 'mined') AND t.status = 'succeeded'
        ORDER BY t.checked_at NULLS FIRST
        LIMIT ${limit}`
    })

    /** What the tracker saw of a transaction: in a block (`mined` or `final`), or sent again (`pending`). */
    const markTransaction = (
      decisionId: string,
      step: TransactionStep,
      seen:
        | { readonly finality: "mined" | "final"; readonly blockNumber: bigint; readonly blockHash: string }
        | { readonly finality: "pending" },
      now: Date
    ) =>
      seen.finality === "pending"
        ? sql`UPDATE agent_transactions SET finality = 'pending', block_number = NULL, block_hash = NULL,
                checked_at = ${now}
              WHERE decision_id = ${decisionId} AND step = ${step} AND finality IN ('pending', 'mined')`
        : sql`UPDATE agent_transactions SET finality = ${seen.finality}, block_number = ${seen.blockNumber.toString()},
                block_hash = ${seen.blockHash}, checked_at = ${now}
              WHERE decision_id = ${decisionId} AND step = ${step} AND finality IN ('pending', 'mined')`

    /** A transaction that can never be mined again: failed and dropped; false when another replica did it first. */
    const dropTransaction = (decisionId: string, step: TransactionStep, now: Date) =>
      sql`UPDATE agent_transactions SET status = 'failed', finality = 'dropped', updated_at = ${now}, checked_at = ${now}
          WHERE decision_id = ${decisionId} AND step = ${step} AND finality IN ('pending', 'mined')
          RETURNING decision_id`.pipe(Effect.map((rows) => rows.length === 1))

    /**
     * A decision whose delivering transaction (the send, or the purchase) was lost for good: failed,
     * with why. False when it was failed already.
     */
    const failLostDecision = (id: string, error: string, now: Date) =>
      sql`UPDATE agent_decisions SET status = 'failed', error = ${error}, updated_at = ${now}
          WHERE id = ${id} AND status IN ('executing', 'executed') RETURNING id`.pipe(
        Effect.map((rows) => rows.length === 1)
      )

    /**
     * Moves an executing decision to its final status; false when it was final already. `unsigned`:
     * only if none of its steps was recorded (an exchange approval moves no money: a decision that
     * got no further is failed all the same, else it would stay executing for ever). Run in a transaction: the decision's row is locked
     * first, and an executor recording its first transaction locks the same row, so the
     * transactions read after the lock include any such record (else a transfer could go out
     * under a decision failed as "nothing signed", and the card be refilled again next interval).
     */
    const finishDecision = (
      id: string,
      status: FinishedStatus,
      error: string | null,
      now: Date,
      guard: FinishGuard = "any"
    ) =>
      Effect.gen(function* () {
        if (guard === "unsigned") {
          yield* sql`SELECT id FROM agent_decisions WHERE id = ${id} AND status = 'executing' FOR UPDATE`
        }
        const rows = yield* sql`
          UPDATE agent_decisions SET status = ${status}, error = ${error}, updated_at = ${now}
          WHERE id = ${id} AND status = 'executing'
          ${guard === "unsigned" ? sql`AND NOT EXISTS (SELECT 1 FROM agent_transactions WHERE decision_id = ${id} AND step <> 'approve')` : sql``}
          RETURNING id`
        return rows.length === 1
      })

    return {
      ...repository("AgentRepo", {
        upsertStrategy,
        findStrategy,
        claimFunding,
        releaseFunding,
        decisions,
        decisionsById,
        claimDue,
        takeOverPage,
        finishPage,
        releaseClaims,
        prepareSlices,
        claimSlice,
        finishSlice,
        latestDecisions,
        insertDecisions,
        setTradeAfter,
        findExecuting,
        lockStale,
        touch,
        transactions,
        recordTransaction,
        repayment,
        repaymentsInDoubt,
        finishTransaction,
        unfinalTransactions,
        markTransaction,
        dropTransaction,
        failLostDecision,
        finishDecision
      }),
      withTransaction: transactionally(sql)
    }
  })
}) {}
