import { HttpApiBuilder } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { ClientApi } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { ChainClient } from "../chain/ChainClient.js"
import { RateLimiter } from "../http/RateLimit.js"
import { DevnetFaucet } from "./Faucet.js"

const FaucetHttpLive = HttpApiBuilder.group(ClientApi, "devnet", (handlers) =>
  Effect.gen(function* () {
    const faucet = yield* DevnetFaucet
    const limiter = yield* RateLimiter
    return handlers.handle("faucet", () =>
      limiter.consume("faucet").pipe(Effect.zipRight(Effect.flatMap(CurrentUser, (user) => faucet.grant(user.address))))
    )
  })
).pipe(Layer.provide([AuthenticationLive, DevnetFaucet.Default]))

/**
 * The faucet's routes, registered only on a chain that can mint (the embedded devnet), as App.ts
 * adds the group to the API in force only then (`withDevnet`). A group layer registers its routes
 * when built; what it provides is a type-level marker, hence the empty layer's cast elsewhere.
 */
export const DevnetHttpLive = Layer.unwrapEffect(
  Effect.map(ChainClient, (chain) =>
    Option.isSome(chain.faucet) ? FaucetHttpLive : (Layer.empty as unknown as typeof FaucetHttpLive)
  )
)
