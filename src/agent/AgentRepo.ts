/** SQL for the agent: strategies, their schedule and the decision log. Infrastructure failures die here. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { repository } from "../Sql.js"
import { DecisionAction, DecisionStatus } from "./Api.js"

export const StrategyRow = Schema.Struct({
  cardId: Schema.String,
  targets: Schema.Record({ key: Schema.String, value: Schema.Number }),
  weeklySpendUsd: Schema.Number,
  timeZone: Schema.String,
  createdAt: Schema.DateFromSelf,
  updatedAt: Schema.DateFromSelf
})
export type StrategyRow = typeof StrategyRow.Type

const DecisionRow = Schema.Struct({
  id: Schema.String,
  at: Schema.DateFromSelf,
  action: DecisionAction,
  symbol: Schema.NullOr(Schema.String),
  usd: Schema.NullOr(Schema.Number),
  reason: Schema.String,
  status: DecisionStatus,
  txs: Schema.Array(Schema.String),
  error: Schema.NullOr(Schema.String)
})

const strategyColumns = "card_id, targets, weekly_spend_usd, time_zone, created_at, updated_at"

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
        INSERT INTO agent_strategies (card_id, targets, weekly_spend_usd, time_zone, created_at, updated_at, due_at)
        VALUES (${cardId}, ${JSON.stringify(targets)}::jsonb, ${weeklySpendUsd}, ${timeZone}, ${now}, ${now}, ${now})
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

    /** The card whose strategy was set first: the deployment's default agent account. */
    const firstStrategyCard = SqlSchema.findOne({
      Request: Schema.Void,
      Result: Schema.Struct({ cardId: Schema.String }),
      execute: () => sql`SELECT card_id FROM agent_strategies ORDER BY created_at, card_id LIMIT 1`
    })

    /** Takes the card's one-time funding; false when it was taken before (by any replica). */
    const claimFunding = (cardId: string, now: Date) =>
      sql`UPDATE agent_strategies SET funded_at = ${now} WHERE card_id = ${cardId} AND funded_at IS NULL
          RETURNING card_id`.pipe(Effect.map((rows) => rows.length === 1))

    /** Gives the funding back after it failed, so that the next strategy update tries again. */
    const releaseFunding = (cardId: string) =>
      sql`UPDATE agent_strategies SET funded_at = NULL WHERE card_id = ${cardId}`

    /** The card's decisions, newest first, with their transactions in the order they were signed. */
    const decisions = SqlSchema.findAll({
      Request: Schema.Struct({ cardId: Schema.String, limit: Schema.Number, before: Schema.NullOr(Schema.String) }),
      Result: DecisionRow,
      execute: ({ before, cardId, limit }) => sql`
        SELECT d.id, d.at, d.action, d.symbol, d.usd, d.reason, d.status, d.error,
               COALESCE(array_agg(t.hash ORDER BY t.created_at) FILTER (WHERE t.hash IS NOT NULL), '{}') AS txs
        FROM agent_decisions d LEFT JOIN agent_transactions t ON t.decision_id = d.id
        WHERE d.card_id = ${cardId} AND (${before}::bigint IS NULL OR d.id < ${before}::bigint)
        GROUP BY d.id
        ORDER BY d.id DESC
        LIMIT ${limit}`
    })

    return repository("AgentRepo", {
      upsertStrategy,
      findStrategy,
      firstStrategyCard,
      claimFunding,
      releaseFunding,
      decisions
    })
  })
}) {}
