/**
 * Many agent cards at once, for the scale tests and `bench/agent.ts`: `count` users, each with a
 * card and a strategy due at `dueAt`, written by PostgreSQL itself (generate_series) so that 100,000
 * cards take seconds. Card `i` is `bench-<i>`; its holder's address is derived from `i`. Such cards
 * are marked `issuer = 'bench'`; `clearAgentBench` removes them and everything of theirs.
 */
import type { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/** The id of seeded card `i` (1-based). */
export const seededCardId = (i: number) => `bench-${i}`

export const seedAgentCards = (
  sql: SqlClient.SqlClient,
  count: number,
  dueAt: Date,
  strategy: { readonly weeklySpendUsd: number } = { weeklySpendUsd: 140 }
) =>
  Effect.gen(function* () {
    // Addresses and card ids are derived from the row number: distinct, and the same on every run.
    yield* sql`
      INSERT INTO users (address, created_at)
      SELECT '0x' || md5('bench-user-' || i) || substr(md5('bench-pad-' || i), 1, 8), ${dueAt}
      FROM generate_series(1, ${count}) i`
    yield* sql`
      INSERT INTO cards (id, address, issuer, issuer_ref, holder, number_sealed, cvv_sealed, last4, expiry,
                         document_hash, created_at)
      SELECT 'bench-' || i, '0x' || md5('bench-user-' || i) || substr(md5('bench-pad-' || i), 1, 8), 'bench',
             'bench-' || i, 'Bench Holder', '\\x00'::bytea, '\\x00'::bytea, '0000', '01/30',
             decode(md5('bench-doc-' || i) || md5('bench-doc2-' || i), 'hex'), ${dueAt}
      FROM generate_series(1, ${count}) i`
    yield* sql`
      INSERT INTO agent_strategies (card_id, targets, weekly_spend_usd, time_zone, created_at, updated_at, due_at)
      SELECT 'bench-' || i, '{"NVDA": 0.5, "SPY": 0.5}'::jsonb, ${strategy.weeklySpendUsd}, 'America/New_York', ${dueAt}, ${dueAt}, ${dueAt}
      FROM generate_series(1, ${count}) i`
  })

export const clearAgentBench = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const bench = sql`SELECT id FROM cards WHERE issuer = 'bench'`
    const benchAddresses = sql`SELECT address FROM cards WHERE issuer = 'bench'`
    yield* sql`DELETE FROM agent_transactions WHERE decision_id IN
                 (SELECT id FROM agent_decisions WHERE card_id IN (${bench}))`
    yield* sql`DELETE FROM agent_decisions WHERE card_id IN (${bench})`
    yield* sql`DELETE FROM agent_strategies WHERE card_id IN (${bench})`
    yield* sql`DELETE FROM events WHERE address IN (${benchAddresses})`
    yield* sql`DELETE FROM event_sequences WHERE address IN (${benchAddresses})`
    yield* sql`WITH gone AS (DELETE FROM cards WHERE issuer = 'bench' RETURNING address)
               DELETE FROM users WHERE address IN (SELECT address FROM gone)`
  })
