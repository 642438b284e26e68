/**
 * The sandbox page in a real headless Chromium (driven by playwright-core): a person opens the
 * provider URL, types a name and a document number, approves, and lands on the return URL; the
 * app then sees the approval and the card.
 *
 * Needs Debian's `chromium` (see test/support/chromium.ts).
 */
import { createServer } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { browser, skipWithoutChromium } from "../support/chromium.js"
import { testServer } from "../support/TestServer.js"
import { kycEnv, me, query, serverBaseUrl, signIn, startSession } from "./helpers.js"

const skip = skipWithoutChromium("SandboxBrowser.test.ts")

/** A stand-in for the web app (the return URL's origin), on a real local port. */
const appHits: Array<string> = []
const webApp = createServer((request, response) => {
  appHits.push(request.url ?? "")
  response.writeHead(200, { "content-type": "text/html" }).end("<h1>back in the app</h1>")
})
await new Promise<void>((resolve) => webApp.listen(0, "127.0.0.1", resolve))
const WEB_APP = `http://127.0.0.1:${(webApp.address() as AddressInfo).port}`
afterAll(() => new Promise<void>((resolve) => webApp.close(() => resolve())))

// The provider sends the person back through this service (API_URL/kyc/return): it must name the server.
const PORT = await Effect.runPromise(freePort)
const API_URL = `http://127.0.0.1:${PORT}`

layer(testServer(kycEnv({ WEB_ORIGIN: WEB_APP, PORT: String(PORT), API_URL }), { chain: InMemoryChain.layer() }), {
  excludeTestServices: true,
  timeout: "60 seconds"
})("sandbox page in Chromium", (it) => {
  it.scoped.skipIf(skip)("a person approves on the page and returns to the app", () =>
    Effect.gen(function* () {
      const base = yield* serverBaseUrl
      const { account, token } = yield* signIn()
      const returnUrl = `${WEB_APP}/kyc/finished?from=sandbox`
      const started = yield* startSession(token, { returnUrl })
      expect(started.status).toBe(200)
      // The URL names the public API_URL; the browser reaches this test server directly.
      const pageUrl = `${base}${new URL(started.body.url).pathname}`

      const { context } = yield* browser
      const page = yield* Effect.promise(() => context.newPage())
      const requested: Array<string> = []
      page.on("request", (request) => requested.push(request.url()))
      const response = yield* Effect.promise(() => page.goto(pageUrl))
      expect(response?.status()).toBe(200)
      expect(yield* Effect.promise(() => page.title())).toBe("Sandbox identity check")
      yield* Effect.promise(() => page.fill("#fullName", "Margaret Hamilton"))
      yield* Effect.promise(() => page.fill("#documentNumber", "MH-1936-0817"))
      yield* Effect.promise(() => Promise.all([page.waitForURL(returnUrl), page.click("button[value=approve]")]))
      expect(page.url()).toBe(returnUrl)
      expect(yield* Effect.promise(() => page.textContent("h1"))).toBe("back in the app")
      expect(appHits).toContain("/kyc/finished?from=sandbox")
      // The page loaded nothing from elsewhere: the page, its form post, the way back through this
      // service, then the return URL.
      const wayBack = `${API_URL}/kyc/return?user=${account.address}`
      expect(requested).toEqual([pageUrl, pageUrl, wayBack, returnUrl])

      // The result came through the signed webhook before the redirect.
      const sessionId = new URL(started.body.url).pathname.split("/").pop()
      const delivered = yield* query<{ n: number }>(
        "SELECT count(*)::int AS n FROM kyc_webhook_deliveries WHERE session_id = $1",
        sessionId
      )
      expect(delivered[0]!.n).toBe(1)
      const after = yield* me(token)
      expect(after).toMatchObject({
        kyc: "approved",
        card: { address: account.address, holder: "Margaret Hamilton" }
      })

      // Opening the page again shows it is finished, with the way back.
      yield* Effect.promise(() => page.goto(pageUrl))
      expect(yield* Effect.promise(() => page.textContent("h1"))).toBe("Identity check finished")
      expect(yield* Effect.promise(() => page.getAttribute("#return", "href"))).toBe(wayBack)
    })
  )

  it.scoped.skipIf(skip)("required fields are enforced by the page; abandon needs none", () =>
    Effect.gen(function* () {
      const base = yield* serverBaseUrl
      const { token } = yield* signIn()
      const started = yield* startSession(token, { returnUrl: `${WEB_APP}/abandoned` })
      const pageUrl = `${base}${new URL(started.body.url).pathname}`
      const { context } = yield* browser
      const page = yield* Effect.promise(() => context.newPage())
      yield* Effect.promise(() => page.goto(pageUrl))
      // Approving with empty fields does not leave the page: the browser refuses the form (HTML validation).
      yield* Effect.promise(() => page.click("button[value=approve]"))
      const missing = yield* Effect.promise(() =>
        page.$$eval("input[required]", (inputs) =>
          inputs.filter((input) => input.matches(":invalid")).map((input) => input.getAttribute("name"))
        )
      )
      expect(missing).toEqual(["fullName", "documentNumber"])
      expect(page.url()).toBe(pageUrl)
      expect((yield* me(token)).kyc).toBe("pending")
      yield* Effect.promise(() =>
        Promise.all([page.waitForURL(`${WEB_APP}/abandoned`), page.click("button[value=abandon]")])
      )
      expect((yield* me(token)).kyc).toBe("none")
    })
  )
})
