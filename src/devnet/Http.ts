import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer } from "effect"
import { ClientApi } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { RateLimiter } from "../RateLimit.js"
import { DevnetFaucet } from "./Faucet.js"

export const DevnetHttpLive = HttpApiBuilder.group(ClientApi, "devnet", (handlers) =>
  Effect.gen(function* () {
    const faucet = yield* DevnetFaucet
    const limiter = yield* RateLimiter
    return handlers.handle("faucet", () =>
      limiter.consume("faucet").pipe(Effect.zipRight(Effect.flatMap(CurrentUser, (user) => faucet.grant(user.address))))
    )
  })
).pipe(Layer.provide([AuthenticationLive, DevnetFaucet.Default]))
