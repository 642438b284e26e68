/**
 * The signed-in user's account: sign-in (a session plus where the user stands), `GET /me` and
 * sign-out. Where the user stands is the identity-check state and the card, reconciled with the
 * identity provider while a check is pending.
 */
import { Effect } from "effect"
import { Auth } from "../auth/Auth.js"
import type { Address } from "../chain/Address.js"
import { traced } from "../observability/Traced.js"
import { checkedConstructor } from "../runtime/SchemaClass.js"
import { Me, SignInResult } from "./Api.js"
import { Standing } from "./Standing.js"

const makeMe = checkedConstructor(Me)
const makeSignInResult = checkedConstructor(SignInResult)

export class Account extends Effect.Service<Account>()("app/Account", {
  effect: Effect.gen(function* () {
    const auth = yield* Auth
    const standing = yield* Standing

    const signIn = traced("Account.signIn")(function* (message: string, signature: `0x${string}`) {
      const session = yield* auth.verify(message, signature)
      // A user created by this sign-in has no identity check and no card yet (both reference the
      // user's row, which no other statement could see): nothing to read or reconcile.
      const { kyc: state, card } = session.created
        ? { kyc: "none" as const, card: null }
        : yield* standing.of(session.address)
      return makeSignInResult({
        token: session.token,
        expiresAt: session.expiresAt,
        address: session.address,
        kyc: state,
        card
      })
    })

    /** The user as authenticated (the session's statement read the user too) and where they stand. */
    const me = traced("Account.me")(function* (user: { readonly address: Address; readonly userCreatedAt: Date }) {
      const { kyc: state, card, owedUsd } = yield* standing.of(user.address)
      return makeMe({ address: user.address, kyc: state, card, owedUsd, createdAt: user.userCreatedAt.getTime() })
    })

    const signOut = traced("Account.signOut")(function* (sessionId: string) {
      yield* auth.signOut(sessionId)
    })

    return { signIn, me, signOut }
  })
}) {}
