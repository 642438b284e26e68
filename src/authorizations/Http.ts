import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Option } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { feature } from "../http/Feature.js"
import { RateLimiter } from "../http/RateLimit.js"
import { CardSandboxApi } from "./Api.js"
import { Authorizations } from "./Authorizations.js"
import { SandboxNetwork, SandboxNetworkKey, SandboxNetworkLive } from "./SandboxNetwork.js"

export const AuthorizationsHttpLive = HttpApiBuilder.group(Api, "authorizations", (handlers) =>
  Effect.gen(function* () {
    const authorizations = yield* Authorizations
    return handlers.handle("list", ({ urlParams }) =>
      Effect.flatMap(CurrentUser, (user) => authorizations.list(user.address, urlParams))
    )
  })
).pipe(Layer.provide(AuthenticationLive))

/**
 * The card network's messages are verified over the exact bytes received, so the body is read raw
 * (`handleRaw` skips HttpApi's JSON decoding); the body limit still applies while reading.
 */
export const CardNetworkHttpLive = HttpApiBuilder.group(Api, "cardNetwork", (handlers) =>
  Effect.gen(function* () {
    const authorizations = yield* Authorizations
    return handlers.handleRaw("message", ({ request }) =>
      Effect.flatMap(Effect.orDie(request.arrayBuffer), (body) =>
        Effect.map(authorizations.receive(new Uint8Array(body), request.headers), (answer) =>
          HttpServerResponse.unsafeJson(answer)
        )
      )
    )
  })
)

const SandboxHttpLive = HttpApiBuilder.group(Api, "cardSandbox", (handlers) =>
  Effect.gen(function* () {
    const network = yield* SandboxNetwork
    const limiter = yield* RateLimiter
    const limited = <A, E, R>(effect: Effect.Effect<A, E, R>) => Effect.zipRight(limiter.consume("cardSandbox"), effect)
    return handlers
      .handle("authorize", ({ payload }) => limited(network.authorize(payload)))
      .handle("increment", ({ path, payload }) => limited(network.increment(path.id, payload.amountUsd)))
      .handle("reverse", ({ path, payload }) => limited(network.reverse(path.id, payload.amountUsd)))
      .handle("clear", ({ path, payload }) => limited(network.clear(path.id, payload.amountUsd)))
      .handle("refund", ({ path, payload }) => limited(network.refund(path.id, payload.amountUsd)))
      .handle("expire", ({ path }) => limited(network.expire(path.id)))
  })
).pipe(Layer.provide(SandboxNetworkLive))

/** The sandbox network's terminal, while it is the card network (its signing key is there only then). */
export const CardSandboxFeature = feature({
  group: CardSandboxApi,
  enabled: Effect.map(SandboxNetworkKey, Option.isSome),
  live: SandboxHttpLive,
  whenOff: {
    paths: ["/sandbox/card-network"],
    message: "the sandbox card network is off: /sandbox/card-network/* exists with CARD_NETWORK=sandbox"
  }
})
