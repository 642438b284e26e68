/** The card app's typed client (src/Client.ts) on the test server: what end-to-end journeys use. */
import { Effect } from "effect"
import type { PrivateKeyAccount } from "viem/accounts"
import { makeClient } from "../../src/Client.js"
import { newAccount } from "./auth.js"

/** The typed client; the test server's `HttpClient` already points at the server. */
export const testClient = (token?: string) => makeClient({ baseUrl: "", ...(token === undefined ? {} : { token }) })

/** Signs in with the typed client; answers the account, its token, the sign-in result and a signed-in client. */
export const signInWithClient = (account: PrivateKeyAccount = newAccount()) =>
  Effect.gen(function* () {
    const anonymous = yield* testClient()
    const { message } = yield* anonymous.auth.challenge({ payload: { address: account.address } })
    const signature = yield* Effect.promise(() => account.signMessage({ message }))
    const result = yield* anonymous.auth.verify({ payload: { message, signature } })
    return { account, token: result.token, result, client: yield* testClient(result.token) }
  })
