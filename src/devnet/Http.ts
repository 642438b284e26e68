import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { ChainClient } from "../chain/ChainClient.js"
import { feature } from "../http/Feature.js"
import { RateLimiter } from "../http/RateLimit.js"
import { DevnetApi } from "./Api.js"
import { DevnetFaucet } from "./Faucet.js"

const FaucetHttpLive = HttpApiBuilder.group(Api, "devnet", (handlers) =>
  Effect.gen(function* () {
    const faucet = yield* DevnetFaucet
    const limiter = yield* RateLimiter
    return handlers.handle("faucet", () =>
      limiter.consume("faucet").pipe(Effect.zipRight(Effect.flatMap(CurrentUser, (user) => faucet.grant(user.address))))
    )
  })
).pipe(Layer.provide([AuthenticationLive, DevnetFaucet.Default]))

/** The faucet, on a chain that can mint (the embedded devnet); elsewhere /devnet/* is no route at all. */
export const DevnetFeature = feature({
  group: DevnetApi,
  enabled: Effect.map(ChainClient, (chain) => Option.isSome(chain.faucet)),
  live: FaucetHttpLive
})
