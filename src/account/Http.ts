import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { Account } from "./Account.js"

export const AccountHttpLive = HttpApiBuilder.group(Api, "account", (handlers) =>
  Effect.gen(function* () {
    const account = yield* Account
    return handlers
      .handle("signout", () => Effect.flatMap(CurrentUser, (user) => account.signOut(user.sessionId)))
      .handle("me", () => Effect.flatMap(CurrentUser, (user) => account.me(user)))
  })
).pipe(Layer.provide(AuthenticationLive))
