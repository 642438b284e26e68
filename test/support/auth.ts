/** Sign-in steps shared by the HTTP tests. */
import { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts"
import { send } from "./http.js"

export const newAccount = () => privateKeyToAccount(generatePrivateKey())

/** Signs in over HTTP; answers the account, its token and the sign-in result body. */
export const signIn = (account: PrivateKeyAccount = newAccount()) =>
  Effect.gen(function* () {
    const challenge = yield* send("POST", "/auth/challenge", { json: { address: account.address } })
    expect(challenge.status).toBe(200)
    const message: string = challenge.body.message
    const signature = yield* Effect.promise(() => account.signMessage({ message }))
    const verified = yield* send("POST", "/auth/verify", { json: { message, signature } })
    expect(verified.status).toBe(200)
    return { account, token: verified.body.token as string, result: verified.body }
  })

/** Rows in the sessions table. */
export const sessionCount = Effect.flatMap(
  SqlClient.SqlClient,
  (sql) => sql<{ n: number }>`SELECT count(*)::int AS n FROM sessions`
).pipe(
  Effect.map((rows) => rows[0]!.n),
  Effect.orDie
)
