import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { Allowances } from "./Allowances.js"
import { Cards } from "./Cards.js"
import { Statement } from "./Statement.js"

export const StatementHttpLive = HttpApiBuilder.group(Api, "statement", (handlers) =>
  Effect.gen(function* () {
    const statement = yield* Statement
    return handlers.handle("activity", ({ urlParams }) =>
      Effect.flatMap(CurrentUser, (user) => statement.activity(user.address, urlParams))
    )
  })
).pipe(Layer.provide([Statement.Default, AuthenticationLive]))

export const CardHttpLive = HttpApiBuilder.group(Api, "card", (handlers) =>
  Effect.gen(function* () {
    const cards = yield* Cards
    const allowances = yield* Allowances
    return handlers
      .handle("controls", () => Effect.flatMap(CurrentUser, (user) => cards.controls(user.address)))
      .handle("setControls", ({ payload }) =>
        Effect.flatMap(CurrentUser, (user) => cards.updateControls(user.address, payload))
      )
      .handle("replace", () => Effect.flatMap(CurrentUser, (user) => cards.replace(user.address)))
      .handle("allowance", () => Effect.flatMap(CurrentUser, (user) => allowances.view(user.address)))
      .handle("requestAllowance", ({ payload }) =>
        Effect.flatMap(CurrentUser, (user) => allowances.request(user.address, payload))
      )
      .handle("submitAllowance", ({ payload }) =>
        Effect.flatMap(CurrentUser, (user) => allowances.submit(user.address, payload.signature as `0x${string}`))
      )
  })
).pipe(Layer.provide([Allowances.Default, AuthenticationLive]))
