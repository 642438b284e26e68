/**
 * SQL for where a user stands, read as one statement across the identity check's and the cards'
 * tables (GET /me is polled: one round trip). Infrastructure failures die here.
 */
import { SqlClient } from "@effect/sql"
import { Effect, Schema } from "effect"
import { CardRow } from "../cards/Cards.js"
import { type ClaimRequest, claimDueCheck } from "../kyc/Kyc.js"
import { KycState } from "../kyc/KycState.js"
import { repository } from "../storage/Sql.js"

const decodeStanding = Schema.decodeUnknown(
  Schema.Struct({ claimedSessionId: Schema.NullOr(Schema.String), status: Schema.NullOr(KycState) })
)
const decodeCard = Schema.decodeUnknown(CardRow)

export class AccountRepo extends Effect.Service<AccountRepo>()("app/AccountRepo", {
  effect: Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient

    /**
     * The user's identity-check state (null: never started), the card's row, and the session to
     * ask the provider about when this statement won the claim of a due look (`claimDueCheck`).
     */
    const standing = (claim: ClaimRequest) =>
      sql`WITH claimed AS (${claimDueCheck(sql, claim)})
          SELECT (SELECT session_id FROM claimed) AS claimed_session_id,
                 (SELECT status FROM kyc_accounts WHERE address = ${claim.address}) AS status,
                 c.id, c.address, c.holder, c.number_sealed, c.cvv_sealed, c.expiry, c.created_at
          FROM (VALUES (1)) AS one LEFT JOIN cards c ON c.address = ${claim.address}`.pipe(
        Effect.flatMap(([row]) =>
          Effect.all({
            found: decodeStanding(row),
            card: (row as { readonly id?: unknown } | undefined)?.id == null ? Effect.succeed(null) : decodeCard(row)
          })
        ),
        Effect.map(({ found, card }) => ({ ...found, card }))
      )

    return repository("AccountRepo", { standing })
  })
}) {}
