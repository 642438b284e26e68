/**
 * `GET /`: a small page naming the service and linking its docs. The built-in identity-check
 * sandbox returns people to APP_URL, which on embedded defaults is this service: they land here.
 */
import { HttpApiBuilder, HttpServerResponse } from "@effect/platform"
import { Effect } from "effect"
import { SERVICE_NAME, SERVICE_VERSION } from "../runtime/ServiceInfo.js"
import { STATIC_PAGE_CSP } from "./PageSecurity.js"

const page = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>${SERVICE_NAME}</title>
<style>body{font-family:system-ui,sans-serif;max-width:40rem;margin:3rem auto;padding:0 1rem;line-height:1.5}</style>
</head>
<body>
<h1>${SERVICE_NAME} <small>${SERVICE_VERSION}</small></h1>
<p>The backend of the payment-card app: sign-in with a wallet, identity check and card, statement,
the refill agent, market data and a demo merchant paid over x402.</p>
<p><a href="/app"><strong>Open the card app</strong></a>: sign in with a wallet, pass the identity check, see the
card and its statement, set the agent's strategy and pay the demo merchant.</p>
<p>Finished an identity check? You can return to the app now.</p>
<ul>
<li><a href="/app">The card app</a></li>
<li><a href="/docs">API reference</a></li>
<li><a href="/openapi.json">OpenAPI document</a></li>
<li><a href="/health">Health</a></li>
</ul>
</body>
</html>
`

const response = HttpServerResponse.text(page, {
  contentType: "text/html; charset=utf-8",
  headers: { "content-security-policy": STATIC_PAGE_CSP }
})

export const LandingLive = HttpApiBuilder.Router.use((router) => router.get("/", Effect.succeed(response)))
