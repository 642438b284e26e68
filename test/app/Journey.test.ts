/**
 * The card holder's web app in a real headless Chromium (Debian's, driven by playwright-core)
 * against the real service: embedded-style devnet (anvil), PostgreSQL, the sandbox identity
 * provider, the demo merchant and the agent live.
 *
 * - The whole journey of a new user, with a development key and again with an injected EIP-1193
 *   wallet (announced over EIP-6963, its key in the test process): sign-in, the sandbox approval
 *   seen without reloading, the strategy (a wrong sum's field message, then saved), the portfolio
 *   chart, a shop order paid in the browser through x402 and seen live on the statement, the
 *   agent's refill seen live, sign-out.
 * - Declined and duplicate identity checks: their sentences and the retry.
 * - Keyboard only: sign-in with a development key and the strategy's save.
 *
 * Every screen is checked on the way (test/support/webapp.ts): no console error, no request outside
 * the service's origin, no serious axe-core violation, no horizontal scroll at 375 px, screenshots.
 */
import { randomBytes } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Page } from "playwright-core"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { kycEnv } from "../kyc/helpers.js"
import { newAccount } from "../support/auth.js"
import { browser, skipWithoutChromium } from "../support/chromium.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import {
  type AppPage,
  checkScreen,
  goTo,
  guardOrigin,
  injectWallet,
  markPage,
  notReloaded,
  onProviderPage,
  press,
  SCREENSHOTS,
  seen,
  TEST_WALLET,
  watchedPage
} from "../support/webapp.js"

const skip = skipWithoutChromium("Journey.test.ts")

// The page's origin must be the service's APP_URL (sign-in domain, the identity check's way back).
const PORT = await Effect.runPromise(freePort)
const ORIGIN = `http://127.0.0.1:${PORT}`
const PAY_TO = "0x000000000000000000000000000000000000dEaD"

const promise = <A>(run: () => Promise<A>) => Effect.promise(run)

/** The session token the app keeps (to check from outside that sign-out revoked it). */
const storedToken = (page: Page) =>
  promise(() =>
    page.evaluate("JSON.parse(localStorage.getItem('card-app.session') ?? '{}').token").then((token) => String(token))
  )

/** Signs in on the sign-in screen with the wallet's button, reading the SIWE message first. */
const signIn = (app: AppPage, button: RegExp, expectedAddress?: string) =>
  Effect.gen(function* () {
    const { page } = app
    yield* press(page, button)
    const message = page.locator("#siwe-message")
    yield* promise(() => message.waitFor())
    const text = (yield* promise(() => message.textContent())) ?? ""
    expect(text).toContain(`127.0.0.1:${PORT} wants you to sign in with your Ethereum account:`)
    if (expectedAddress !== undefined) expect(text).toContain(expectedAddress)
    yield* checkScreen(app, "sign-in-message")
    yield* press(page, "Sign and sign in")
  })

/** A fresh browser's page on the sign-in screen; `cut` (when given) fails its requests as a lost network would. */
const freshPage = (cut?: { value: boolean }) =>
  Effect.gen(function* () {
    const { context } = yield* browser
    const outside = yield* guardOrigin(context, ORIGIN, cut)
    const app = yield* watchedPage(context, outside)
    yield* promise(() => app.page.goto(`${ORIGIN}/app/sign-in`))
    yield* seen(app.page, "Sign in with a wallet")
    return { context, app, page: app.page }
  })

const journey = (wallet: "development" | "injected") =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const { context } = yield* browser
    const outside = yield* guardOrigin(context, ORIGIN)
    const app = yield* watchedPage(context, outside)
    const { page } = app
    const account = newAccount()
    const asked = wallet === "injected" ? yield* injectWallet(page, account, chain.chainId) : []
    const shot = (name: string) => checkScreen(app, `${wallet}-${name}`)

    // /app leads to the sign-in.
    yield* promise(() => page.goto(`${ORIGIN}/app`))
    yield* promise(() => page.waitForURL(`${ORIGIN}/app/sign-in`))
    yield* seen(page, "Sign in with a wallet")
    if (wallet === "injected") yield* seen(page, `Connect ${TEST_WALLET.name}`)
    yield* shot("sign-in")
    if (wallet === "development") yield* signIn(app, /^Use a development key$/)
    else yield* signIn(app, new RegExp(`Connect ${TEST_WALLET.name}`), account.address)
    yield* promise(() => page.waitForURL(`${ORIGIN}/app/identity`))
    yield* seen(page, "You have not started the identity check yet.")
    yield* shot("identity-none")

    // The sandbox approves in another tab; this tab learns it from the event stream.
    yield* markPage(page)
    yield* press(page, "Start the identity check")
    yield* seen(page, "Your identity check is in progress.")
    yield* shot("identity-pending")
    yield* onProviderPage(context, page, ORIGIN, "approve")
    yield* seen(page, "Your identity is confirmed and your card is issued.")
    yield* notReloaded(page)
    yield* shot("identity-approved")

    // The card: masked number and hidden CVV until revealed; test USD1 from the devnet faucet.
    yield* goTo(page, "Card")
    yield* seen(page, "Grace Hopper")
    expect(yield* promise(() => page.locator("#card-number").textContent())).toMatch(/^•••• •••• •••• \d{4}$/)
    expect(yield* promise(() => page.locator("#card-cvv").textContent())).toBe("•••")
    yield* press(page, "Show number")
    expect(yield* promise(() => page.locator("#card-number").textContent())).toMatch(/^9406 \d{4} \d{4} \d{4}$/)
    yield* press(page, "Show CVV")
    expect(yield* promise(() => page.locator("#card-cvv").textContent())).toMatch(/^\d{3}$/)
    yield* press(page, "Add test USD1 (devnet)")
    yield* seen(page, /Added \$100\.00 of test USD1/)
    expect(yield* promise(() => page.locator("#card-balance").textContent())).toBe("$100.00")
    yield* shot("card")

    // The strategy: a wrong sum shows the API's message at the weights; a right one saves.
    yield* goTo(page, "Agent")
    yield* promise(() => page.getByLabel("NVDA", { exact: true }).fill("50"))
    yield* promise(() => page.getByLabel("SPY", { exact: true }).fill("30"))
    yield* promise(() => page.getByLabel("Weekly card spend (USD)").fill("0"))
    yield* press(page, "Save the strategy")
    const sumMessage = page.locator("#targets-message")
    yield* promise(() => sumMessage.waitFor())
    expect(yield* promise(() => sumMessage.textContent())).toMatch(/weights must sum to 1 .*got 0\.8/)
    expect(yield* promise(() => page.locator("fieldset").getAttribute("aria-invalid"))).toBe("true")
    yield* shot("agent-wrong-sum")
    yield* promise(() => page.getByLabel("SPY", { exact: true }).fill("50"))
    yield* press(page, "Save the strategy")
    yield* seen(page, /^Strategy saved/)
    expect(yield* promise(() => page.locator("#targets-message").count())).toBe(0)

    // The portfolio chart: one bar per holding for the weights and one for the targets.
    // Read together in the page (the wallet's funding may still be landing when the screen first reads it).
    const drawn = yield* eventually(
      "the chart to draw a pair of bars per row of the holdings table",
      promise(
        () =>
          page.evaluate(
            "({ bars: document.querySelector('#portfolio-chart')?.dataset.bars, rows: document.querySelectorAll('table.holdings tbody tr').length })"
          ) as Promise<{ readonly bars?: string; readonly rows: number }>
      ),
      ({ bars, rows }) => rows >= 2 && bars === `${rows},${rows}`
    )
    expect(drawn.rows).toBeGreaterThanOrEqual(2)
    // A preview at a chosen time: what the agent would decide then, and why.
    yield* promise(() => page.getByLabel(/^Date and time/).fill("2026-11-27T12:45"))
    yield* press(page, "Preview")
    yield* seen(page, /^At Nov 27, 2026, .*: (none|refill|hold|rebalance)/)
    yield* shot("agent")

    // A second tab on the statement: the payment and the refill must appear there live.
    const statement = yield* watchedPage(context, outside)
    yield* promise(() => statement.page.goto(`${ORIGIN}/app/statement`))
    yield* seen(statement.page, "Nothing yet: payments and refills appear here.")
    yield* markPage(statement.page)
    yield* checkScreen(statement, `${wallet}-statement-empty`)

    // The shop: an order paid through x402 in the browser takes the card to $3, below the agent's floor.
    yield* goTo(page, "Shop")
    yield* promise(() => page.getByLabel("Amount (USD)").fill("97.00"))
    yield* promise(() => page.getByLabel("Description").fill("Noise-cancelling headphones"))
    yield* press(page, "Create the order")
    yield* seen(page, /^Pay \$97\.00 with/)
    yield* shot("shop-order")
    yield* press(page, /^Pay \$97\.00 with/)
    yield* promise(() => page.locator(".order-status", { hasText: "paid" }).waitFor())
    const tx = yield* promise(() => page.locator(".receipt .hash").first().getAttribute("title"))
    expect(tx).toMatch(/^0x[0-9a-f]{64}$/)
    yield* shot("shop-paid")
    if (wallet === "injected") expect(asked).toEqual(expect.arrayContaining(["personal_sign", "eth_signTypedData_v4"]))

    yield* promise(() => statement.page.locator(`li.activity.payment[data-tx="${tx}"]`).waitFor())
    yield* seen(statement.page, "Noise-cancelling headphones")
    yield* promise(() => statement.page.locator("li.activity.refill").first().waitFor())
    yield* notReloaded(statement.page)
    yield* checkScreen(statement, `${wallet}-statement`)

    // The decision log holds the executed refill, with its reason and status.
    yield* goTo(page, "Agent")
    yield* promise(() => page.locator("li.decision.executed", { hasText: "refill" }).first().waitFor())
    yield* shot("agent-decisions")

    yield* goTo(page, "Market")
    yield* seen(page, /^The US market/)
    yield* promise(() => page.locator("table.tokens tbody tr").first().waitFor())
    yield* shot("market")

    // Sign-out: back to the sign-in, the token revoked, the other tab signed out too.
    const token = yield* storedToken(page)
    yield* press(page, "Sign out")
    yield* promise(() => page.waitForURL(`${ORIGIN}/app/sign-in`))
    yield* seen(page, "You are signed out.")
    const after = yield* promise(() => fetch(`${ORIGIN}/me`, { headers: { authorization: `Bearer ${token}` } }))
    expect(after.status).toBe(401)
    yield* promise(() => statement.page.waitForURL(`${ORIGIN}/app/sign-in`))
    yield* shot("signed-out")

    // The only refused API calls were those the journey meant: no strategy yet, the wrong sum, the
    // x402 client's first (unpaid) request.
    const expected = /\/strategy (404|400)$|\/merchant\/orders\/[\w-]+\/pay 402$/
    expect(app.refusals.filter((refusal) => !expected.test(refusal))).toEqual([])
    expect(statement.refusals).toEqual([])
  })

layer(
  testServer(
    kycEnv({
      PORT: String(PORT),
      APP_URL: ORIGIN,
      MERCHANT_PAY_TO: PAY_TO,
      AGENT_MODE: "live",
      AGENT_INTERVAL: "1 second"
    })
  ),
  { excludeTestServices: true, timeout: "180 seconds" }
)("the web app in Chromium", (it) => {
  it.scoped.skipIf(skip)("a new user with a development key: the whole journey", () => journey("development"))

  it.scoped.skipIf(skip)("the same journey with an injected EIP-1193 wallet (EIP-6963)", () => journey("injected"))

  it.scoped.skipIf(skip)("declined and duplicate identity checks show their sentences and the retry", () =>
    Effect.gen(function* () {
      const { context, app, page } = yield* freshPage()
      yield* signIn(app, /^Use a development key$/)
      yield* press(page, "Start the identity check")
      yield* onProviderPage(context, page, ORIGIN, "decline")
      yield* seen(page, "The identity provider declined your identity check.")
      yield* seen(page, "You can try again, with a valid identity document whose details match what you type.")
      yield* checkScreen(app, "identity-declined")

      yield* press(page, "Try the identity check again")
      yield* seen(page, "Your identity check is in progress.")
      yield* onProviderPage(context, page, ORIGIN, "duplicate")
      yield* seen(page, "This identity document already holds a card with another account")
      yield* seen(page, "Sign out, then sign in with the wallet that holds that card.")
      expect(yield* promise(() => page.getByRole("button", { name: "Sign out" }).count())).toBeGreaterThan(0)
      yield* checkScreen(app, "identity-duplicate")
    })
  )

  it.scoped.skipIf(skip)("keyboard only: sign-in with a development key and the strategy's save", () =>
    Effect.gen(function* () {
      const { app, page } = yield* freshPage()

      interface Focused {
        readonly text: string
        readonly id: string
      }
      const focused = promise(
        () =>
          page.evaluate(
            "({ text: document.activeElement?.textContent?.trim() ?? '', id: document.activeElement?.id ?? '' })"
          ) as Promise<Focused>
      )
      /** Presses Tab until the focused element is the one `describe`d (at most 60 times). */
      const tabTo = (describe: string, is: (element: Focused) => boolean) =>
        Effect.gen(function* () {
          const passed: Array<string> = []
          for (let presses = 0; presses < 60; presses++) {
            yield* promise(() => page.keyboard.press("Tab"))
            const element = yield* focused
            if (is(element)) return
            passed.push(element.id === "" ? element.text.slice(0, 40) : `#${element.id}`)
          }
          return yield* Effect.dieMessage(`Tab never reached ${describe}; focus went to: ${passed.join(" | ")}`)
        })
      const enter = promise(() => page.keyboard.press("Enter"))
      const tabToAndEnter = (describe: string, is: (element: Focused) => boolean) =>
        Effect.zipRight(tabTo(describe, is), enter)

      yield* tabToAndEnter("the development key's button", (element) => element.text === "Use a development key")
      yield* promise(() => page.locator("#siwe-message").waitFor())
      // The message is shown and the sign button takes the focus once it is enabled (an effect after
      // the render that shows it): Enter signs. Waiting fails the test if the focus never arrives.
      yield* promise(() =>
        page.waitForFunction("document.activeElement?.textContent?.trim() === 'Sign and sign in'", undefined, {
          timeout: 10_000
        })
      )
      expect((yield* focused).text).toBe("Sign and sign in")
      yield* enter
      yield* promise(() => page.waitForURL(`${ORIGIN}/app/identity`))

      // The identity check is approved outside the page (not part of this check); the page hears of it live.
      const token = yield* storedToken(page)
      const { url } = yield* promise(() =>
        fetch(`${ORIGIN}/kyc/session`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body: "{}"
        }).then((response) => response.json() as Promise<{ url: string }>)
      )
      const form = new URLSearchParams({
        fullName: "Alan Turing",
        documentNumber: `AT-${randomBytes(6).toString("hex")}`,
        outcome: "approve"
      })
      expect((yield* promise(() => fetch(url, { method: "POST", body: form, redirect: "manual" }))).status).toBe(303)
      yield* seen(page, "Your identity is confirmed and your card is issued.")

      yield* tabToAndEnter("the Agent link", (element) => element.text === "Agent")
      yield* promise(() => page.getByLabel("NVDA", { exact: true }).waitFor())
      yield* tabTo("the NVDA weight", (element) => element.id === "weight-NVDA")
      yield* promise(() => page.keyboard.type("100"))
      yield* tabToAndEnter("the save button", (element) => element.text === "Save the strategy")
      yield* seen(page, /^Strategy saved/)
      yield* checkScreen(app, "keyboard-strategy-saved")
    })
  )

  it.scoped.skipIf(skip)("errors read as sentences; a lost connection shows a banner and recovers by itself", () =>
    Effect.gen(function* () {
      const cut = { value: false }
      const { app, page } = yield* freshPage(cut)
      yield* signIn(app, /^Use a development key$/)
      yield* promise(() => page.waitForURL(`${ORIGIN}/app/identity`))

      // The API's message for a bad amount, at the amount's field (not a JSON dump).
      yield* goTo(page, "Shop")
      yield* promise(() => page.getByLabel("Amount (USD)").fill("4.2.0"))
      yield* press(page, "Create the order")
      const amountMessage = page.locator("#order-amount-message")
      yield* promise(() => amountMessage.waitFor())
      expect(yield* promise(() => amountMessage.textContent())).not.toMatch(/[{}]/)
      expect(yield* promise(() => page.getByLabel("Amount (USD)").getAttribute("aria-invalid"))).toBe("true")
      yield* checkScreen(app, "shop-bad-amount")

      // The network goes: a call fails, the banner says so; it comes back: the banner goes by itself.
      yield* goTo(page, "Market")
      yield* promise(() => page.locator("table.tokens tbody tr").first().waitFor())
      cut.value = true
      yield* press(page, "Refresh")
      yield* seen(page, "The connection to the service is lost.")
      yield* seen(page, "The service cannot be reached.")
      yield* promise(() => page.screenshot({ path: `${SCREENSHOTS}/connection-lost-1280.png` }))
      cut.value = false
      yield* promise(() => page.getByText("The connection to the service is lost.").waitFor({ state: "detached" }))
      // The screen read its data again: the error is gone, the tokens are there.
      yield* promise(() => page.getByText("The service cannot be reached.").waitFor({ state: "detached" }))
      yield* promise(() => page.locator("table.tokens tbody tr").first().waitFor())
      expect(app.outside).toEqual([])
      // What the cut network made the browser log, and nothing else.
      expect(
        app.errors.filter((error) => !error.startsWith("Failed to load resource: net::ERR_INTERNET_DISCONNECTED"))
      ).toEqual([])
    })
  )
})
