/**
 * SQL for where a user stands, read as one statement across the identity check's and the cards'
 * tables (GET /me is polled: one round trip, and a read). Infrastructure failures die here.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { CardRow } from "../cards/Cards.js"
import { type LookRequest, lookIsDue } from "../kyc/Kyc.js"
import { KycState } from "../kyc/KycState.js"
import { repository } from "../storage/Sql.js"

const decodeStanding = Schema.decodeUnknown(
  Schema.Struct({
    status: Schema.NullOr(KycState),
    lookDue: Schema.NullOr(Schema.Boolean),
    owedMicros: Schema.BigInt
  })
)
const decodeCard = Schema.decodeUnknown(CardRow)

export class AccountRepo extends Effect.Service<AccountRepo>()("app/AccountRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * The user's identity-check state (null: never started), whether a look at the provider about
     * it is due (`lookIsDue`), the card's row and what the card owes the card program. Writes nothing: the claim of a due look is the
     * identity check's own statement.
     */
    const standing = (look: LookRequest) =>
      sql`SELECT k.status, k.look_due,
                 c.id, c.address, c.holder, c.number_sealed, c.cvv_sealed, c.expiry, c.created_at,
                 coalesce(c.owed_micros, 0)::text AS owed_micros
          FROM (VALUES (1)) AS one
          LEFT JOIN (SELECT status, ${lookIsDue(sql, look)} AS look_due
                     FROM kyc_accounts WHERE address = ${look.address}) k ON true
          LEFT JOIN cards c ON c.address = ${look.address}`.pipe(
        Effect.flatMap(([row]) =>
          Effect.zipWith(
            decodeStanding(row),
            (row as { readonly id?: unknown } | undefined)?.id == null ? Effect.succeed(null) : decodeCard(row),
            ({ status, lookDue, owedMicros }, card) => ({ status, lookDue: lookDue === true, card, owedMicros })
          )
        )
      )

    return repository("AccountRepo", { standing })
  })
}) {}
