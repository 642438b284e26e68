import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { Statement } from "./Statement.js"

export const StatementHttpLive = HttpApiBuilder.group(Api, "statement", (handlers) =>
  Effect.gen(function* () {
    const statement = yield* Statement
    return handlers.handle("activity", ({ urlParams }) =>
      Effect.flatMap(CurrentUser, (user) => statement.activity(user.address, urlParams))
    )
  })
).pipe(Layer.provide([Statement.Default, AuthenticationLive]))
