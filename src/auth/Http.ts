import { HttpApiBuilder, HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Redacted } from "effect"
import { Api } from "../Api.js"
import { Account } from "../account/Account.js"
import { RateLimiter } from "../http/RateLimit.js"
import { Authentication } from "./Api.js"
import { Auth } from "./Auth.js"

/** A refused bearer token answers 401 with `WWW-Authenticate: Bearer`. */
export const withBearerChallenge = <A, E, R>(authenticate: Effect.Effect<A, E, R>) =>
  authenticate.pipe(
    Effect.tapError(() =>
      HttpApp.appendPreResponseHandler((_request, response) =>
        Effect.succeed(HttpServerResponse.setHeader(response, "www-authenticate", 'Bearer realm="api"'))
      )
    )
  )

export const AuthenticationLive = Layer.effect(
  Authentication,
  Effect.map(Auth, (auth) =>
    Authentication.of({ bearer: (token) => withBearerChallenge(auth.authenticate(Redacted.value(token))) })
  )
)

export const AuthHttpLive = HttpApiBuilder.group(Api, "auth", (handlers) =>
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
