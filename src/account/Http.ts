import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { Auth } from "../auth/Auth.js"
import { AuthenticationLive } from "../auth/Http.js"
import { RateLimiter } from "../http/RateLimit.js"
import { Account } from "./Account.js"

/** The `auth` group: a challenge from auth/, the sign-in with where the user stands from Account. */
export const SignInHttpLive = HttpApiBuilder.group(Api, "auth", (handlers) =>
  Effect.gen(function* () {
    const auth = yield* Auth
    const account = yield* Account
    const limiter = yield* RateLimiter
    return handlers
      .handle("challenge", ({ payload }) =>
        limiter.consume("signin").pipe(Effect.zipRight(auth.challenge(payload.address)))
      )
      .handle("verify", ({ payload }) =>
        limiter
          .consume("signin")
          .pipe(Effect.zipRight(account.signIn(payload.message, payload.signature as `0x${string}`)))
      )
  })
)

export const AccountHttpLive = HttpApiBuilder.group(Api, "account", (handlers) =>
  Effect.gen(function* () {
    const account = yield* Account
    return handlers
      .handle("signout", () => Effect.flatMap(CurrentUser, (user) => account.signOut(user.sessionId)))
      .handle("me", () => Effect.flatMap(CurrentUser, (user) => account.me(user)))
  })
).pipe(Layer.provide(AuthenticationLive))
