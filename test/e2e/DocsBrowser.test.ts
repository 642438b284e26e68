/**
 * /docs in a real headless Chromium with every request outside this service blocked: the API
 * reference renders (the title, the operations) from the service alone, and nothing fails in the
 * page's console. Needs Debian's `chromium` (see test/support/chromium.ts).
 */
import { HttpServer } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { ScriptedAgentWallet } from "../../src/agent/ScriptedAgentWallet.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { browser, skipWithoutChromium } from "../support/chromium.js"
import { testServer } from "../support/TestServer.js"

const skip = skipWithoutChromium("DocsBrowser.test.ts")

const TITLE = "Card, Agent and Demo Merchant Service"

const baseUrl = Effect.map(HttpServer.HttpServer, (server) => {
  if (server.address._tag !== "TcpAddress") throw new Error("expected a TCP server")
  return `http://127.0.0.1:${server.address.port}`
})

layer(
  testServer(
    { MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD", AGENT_MODE: "dry" },
    { chain: InMemoryChain.layer(), agentWallet: ScriptedAgentWallet.layer() }
  ),
  { excludeTestServices: true, timeout: "90 seconds" }
)("/docs in Chromium", (it) => {
  it.scoped.skipIf(skip)("renders the reference from this service alone, with no console error", () =>
    Effect.gen(function* () {
      const base = yield* baseUrl
      const { context } = yield* browser
      const blocked: Array<string> = []
      const served: Array<string> = []
      yield* Effect.promise(() =>
        context.route("**/*", (route) => {
          const url = route.request().url()
          if (url.startsWith(`${base}/`)) {
            served.push(url)
            return route.continue()
          }
          blocked.push(url)
          return route.abort("blockedbyclient")
        })
      )
      const page = yield* Effect.promise(() => context.newPage())
      const errors: Array<string> = []
      page.on("console", (message) => {
        if (message.type() === "error") errors.push(message.text())
      })
      page.on("pageerror", (error) => errors.push(error.message))

      const response = yield* Effect.promise(() => page.goto(`${base}/docs`))
      expect(response?.status()).toBe(200)
      // Rendered under its strict policy: only its own inline scripts (by hash), never framed.
      const policy = (yield* Effect.promise(() => response!.allHeaders()))["content-security-policy"]
      expect(policy).toMatch(/^default-src 'none'; script-src 'wasm-unsafe-eval'( 'sha256-[A-Za-z0-9+/=]+')+;/)
      expect(policy).toContain("frame-ancestors 'none'")
      // Rendered by Scalar's script, not just the HTML <title>: the heading, the first group's operations.
      yield* Effect.promise(() => page.getByRole("heading", { name: TITLE }).first().waitFor())
      yield* Effect.promise(() => page.getByText("Readiness", { exact: true }).first().waitFor())
      yield* Effect.promise(() => page.waitForLoadState("networkidle"))

      // No toolbar offering to upload the document to Scalar or to generate SDKs there.
      expect(yield* Effect.promise(() => page.getByText("Generate SDKs").count())).toBe(0)
      expect(blocked).toEqual([])
      expect(errors).toEqual([])
      expect(served).toContain(`${base}/docs`)
      // A script added to the page (as an injection would) does not run.
      const ran = yield* Effect.promise(() =>
        page.evaluate(`(() => {
          const injected = document.createElement("script")
          injected.textContent = "window.injectedRan = true"
          document.body.appendChild(injected)
          return window.injectedRan === true
        })()`)
      )
      expect(ran).toBe(false)
    })
  )
})
