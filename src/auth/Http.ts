import { HttpApp, HttpServerResponse } from "@effect/platform"
import { Effect, Layer, Redacted } from "effect"
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
