/** Agent test steps: a signed-in user with a card, through the scripted identity provider. */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { ScriptedKycProvider, ScriptedOutcome } from "../../src/kyc/ScriptedKycProvider.js"
import { newAccount, signIn } from "./auth.js"
import { bearer, send } from "./http.js"

/** Signs a user in (a new one unless given) and has the scripted provider approve them: they hold a card. */
export const cardHolder = (fullName = "Ada Lovelace", account = newAccount()) =>
  Effect.gen(function* () {
    const kyc = yield* ScriptedKycProvider
    const user = yield* signIn(account)
    const documentNumber = `DOC-${randomBytes(6).toString("hex")}`
    yield* kyc.script(user.account.address, ScriptedOutcome.Approve({ fullName, documentNumber }))
    expect((yield* send("POST", "/kyc/session", { headers: bearer(user.token) })).status).toBe(200)
    const me = yield* send("GET", "/me", { headers: bearer(user.token) })
    expect(me.body.kyc).toBe("approved")
    const sql = yield* SqlClient.SqlClient
    const [card] = yield* sql<{ id: string }>`SELECT id FROM cards WHERE address = ${user.account.address}`.pipe(
      Effect.orDie
    )
    return { ...user, cardId: card!.id }
  })
