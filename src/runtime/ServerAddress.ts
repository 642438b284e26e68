import type { HttpServer } from "@effect/platform"
import { Context, Deferred, Effect, Layer } from "effect"

/**
 * Where this process listens, known only once the HTTP server is up (it starts last). Services
 * built before it (the sandbox identity provider posts webhooks to its own server) await it.
 */
export class ServerAddress extends Context.Tag("app/ServerAddress")<
  ServerAddress,
  Deferred.Deferred<HttpServer.Address>
>() {
  static readonly layer = Layer.effect(ServerAddress, Deferred.make<HttpServer.Address>())
}

export const awaitServerAddress = Effect.flatMap(ServerAddress, Deferred.await)
