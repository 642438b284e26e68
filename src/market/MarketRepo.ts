/** SQL for the market's close references. Infrastructure failures die here. */
import { SqlClient, SqlSchema } from "@effect/sql"
import { Effect, Schema } from "effect"
import { Address } from "../chain/Address.js"
import { repository } from "../storage/Sql.js"

/** One observation of a token's price in the regular session. */
export const CloseRefRow = Schema.Struct({
  token: Address,
  symbol: Schema.String,
  price: Schema.Number,
  observedAt: Schema.DateFromSelf,
  feedUpdatedAt: Schema.DateFromSelf
})
export type CloseRefRow = typeof CloseRefRow.Type

export class MarketRepo extends Effect.Service<MarketRepo>()("app/MarketRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    const upsert = SqlSchema.void({
      Request: Schema.Struct({ chainId: Schema.Number, rows: Schema.Array(CloseRefRow) }),
      execute: ({ chainId, rows }) =>
        sql`INSERT INTO close_refs ${sql.insert(rows.map((row) => ({ chainId, ...row })))}
            ON CONFLICT (chain_id, token) DO UPDATE SET
              symbol = excluded.symbol,
              price = excluded.price,
              observed_at = excluded.observed_at,
              feed_updated_at = excluded.feed_updated_at
            WHERE excluded.observed_at > close_refs.observed_at`
    })

    const findAll = SqlSchema.findAll({
      Request: Schema.Number,
      Result: CloseRefRow,
      execute: (chainId) =>
        sql`SELECT token, symbol, price, observed_at, feed_updated_at FROM close_refs WHERE chain_id = ${chainId}`
    })

    /**
     * Records regular-session observations. A stored reference only moves to a newer observation,
     * so replicas (and late writers) never move it back.
     */
    const record = (chainId: number, rows: ReadonlyArray<CloseRefRow>) =>
      rows.length === 0 ? Effect.void : upsert({ chainId, rows })

    return repository("MarketRepo", {
      record,
      /** Every stored close reference of the chain. */
      all: findAll
    })
  })
}) {}
