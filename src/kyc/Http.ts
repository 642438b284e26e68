import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect, Layer } from "effect"
import { Api } from "../Api.js"
import { CurrentUser } from "../auth/Api.js"
import { AuthenticationLive } from "../auth/Http.js"
import { STATIC_PAGE_CSP } from "../http/PageSecurity.js"
import { Kyc } from "./Kyc.js"
import { SandboxDesk } from "./SandboxDesk.js"

export const KycHttpLive = HttpApiBuilder.group(Api, "kyc", (handlers) =>
  Effect.gen(function* () {
    const kyc = yield* Kyc
    return handlers.handle("startSession", ({ payload }) =>
      Effect.flatMap(CurrentUser, (user) => kyc.startSession(user.address, payload?.returnUrl))
    )
  })
).pipe(Layer.provide(AuthenticationLive))

/**
 * Webhooks are verified over the exact bytes received, so the body is read raw (`handleRaw`
 * skips HttpApi's JSON decoding); the 64 KiB body limit still applies while reading. The person
 * coming back from the provider is sent on to their session's return URL.
 */
export const KycWebhookHttpLive = HttpApiBuilder.group(Api, "kycWebhook", (handlers) =>
  Effect.gen(function* () {
    const kyc = yield* Kyc
    return handlers
      .handleRaw("webhook", ({ path, request }) =>
        Effect.flatMap(Effect.orDie(request.arrayBuffer), (body) =>
          kyc.receiveWebhook(path.provider, new Uint8Array(body), request.headers)
        )
      )
      .handle("comeBack", ({ urlParams }) =>
        Effect.map(kyc.returnUrlOf(urlParams.user), (url) =>
          HttpServerResponse.redirect(url, { status: 303, headers: { "cache-control": "no-store" } })
        )
      )
  })
)

/** The sandbox page is HTML for a person: no framing, nothing loaded from elsewhere (never cached: Server.ts). */
const pageHeaders = {
  "content-security-policy": STATIC_PAGE_CSP,
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY"
}

export const KycSandboxHttpLive = HttpApiBuilder.group(Api, "kycSandbox", (handlers) =>
  Effect.gen(function* () {
    const desk = yield* SandboxDesk
    return handlers
      .handle("page", ({ path }) =>
        Effect.map(desk.page(path.sessionId), ({ html }) =>
          HttpServerResponse.text(html, { contentType: "text/html; charset=utf-8", headers: pageHeaders })
        )
      )
      .handle("submit", ({ path, payload }) =>
        Effect.map(desk.submit(path.sessionId, payload), ({ redirectTo }) =>
          HttpServerResponse.redirect(redirectTo, { status: 303 })
        )
      )
  })
)
