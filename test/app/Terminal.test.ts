/**
 * The web app's terminal (/app/terminal) in a real headless Chromium (Debian's, driven by
 * playwright-core) against the real service on a devnet with the sandbox card network: a holder
 * signed in with a development key, through the sandbox identity check, with USD1 from the faucet,
 * charges their own card ("Use my card") and reads the answer in words, focused; a wrong CVV reads
 * as the verification failure; signed out, a card typed by hand still charges, by keyboard, after a
 * refused expiry shown (and focused) at its field. axe-core finds no
 * violation on the terminal (of any impact), and nothing scrolls sideways at 390 px.
 */
import { readFileSync } from "node:fs"
import { createRequire } from "node:module"
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import type { Page } from "playwright-core"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { kycEnv } from "../kyc/helpers.js"
import { followedUsd1 } from "../support/cards.js"
import { browser, skipWithoutChromium } from "../support/chromium.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import {
  checkScreen,
  goTo,
  guardOrigin,
  onProviderPage,
  PAGE_WAIT_MS,
  press,
  seen,
  watchedPage
} from "../support/webapp.js"

const skip = skipWithoutChromium("Terminal.test.ts")

// The page's origin must be the service's APP_URL (the sign-in message's domain).
const PORT = await Effect.runPromise(freePort)
const ORIGIN = `http://127.0.0.1:${PORT}`

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8")

const promise = <A>(run: () => Promise<A>) => Effect.promise(run)

/** The decline codes of the API: the page says each in words and never shows one. */
const CODES =
  /card_verification_failed|insufficient_funds|card_frozen|card_canceled|card_expired|limit_exceeded|merchant_category_blocked|funds_unknown|allowance_missing|allowance_exceeded|stand_in/

interface Session {
  readonly token: string
  readonly address: string
}

/** The session the app keeps in localStorage. */
const storedSession = (page: Page) =>
  promise(() => page.evaluate("JSON.parse(localStorage.getItem('card-app.session') ?? '{}')") as Promise<Session>)

/** A bearer-authenticated GET of the API, from outside the page. */
const api = (path: string, token: string) =>
  promise(() =>
    fetch(`${ORIGIN}${path}`, { headers: { authorization: `Bearer ${token}` } }).then(
      async (response) => (await response.json()) as unknown
    )
  )

/** Waits until the answer shows `text` and holds the focus (moved there by an effect after the render). */
const answered = (page: Page, text: string) =>
  Effect.gen(function* () {
    const answer = page.locator("#terminal-answer")
    yield* promise(() => answer.getByText(text).waitFor())
    yield* promise(() =>
      page.waitForFunction("document.activeElement?.id === 'terminal-answer'", undefined, { timeout: PAGE_WAIT_MS })
    )
    expect(yield* promise(() => answer.getAttribute("role"))).toBe("status")
    const shown = (yield* promise(() => page.evaluate("document.body.innerText"))) as string
    expect(shown).not.toMatch(CODES)
    return ((yield* promise(() => answer.textContent())) ?? "").trim()
  })

/** Every axe-core violation on the page, whatever its impact. */
const axeViolations = (page: Page) =>
  Effect.gen(function* () {
    if ((yield* promise(() => page.evaluate("typeof axe"))) === "undefined") {
      yield* promise(() => page.evaluate(axeSource))
    }
    const violations = (yield* promise(() =>
      page.evaluate("axe.run(document).then((results) => results.violations)")
    )) as ReadonlyArray<{ readonly id: string; readonly impact: string | null; readonly nodes: ReadonlyArray<unknown> }>
    return violations.map((violation) => `${violation.id} (${violation.impact}): ${JSON.stringify(violation.nodes)}`)
  })

const noSidewaysScroll = (page: Page, width: number) =>
  Effect.gen(function* () {
    const size = page.viewportSize() ?? { width: 1280, height: 900 }
    yield* promise(() => page.setViewportSize({ width, height: 900 }))
    const overflow = Number(
      yield* promise(() => page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))
    )
    expect(overflow, `horizontal scroll at ${width} px`).toBeLessThanOrEqual(0)
    yield* promise(() => page.setViewportSize(size))
  })

layer(testServer(kycEnv({ PORT: String(PORT), APP_URL: ORIGIN })), {
  excludeTestServices: true,
  timeout: "180 seconds"
})("the terminal in Chromium", (it) => {
  it.scoped.skipIf(skip)(
    "a holder charges their own card: approved, then a wrong CVV declined in words; signed out, a typed card",
    () =>
      Effect.gen(function* () {
        const { context } = yield* browser
        const outside = yield* guardOrigin(context, ORIGIN)
        const app = yield* watchedPage(context, outside)
        const { page } = app

        // Signed in with a development key.
        yield* promise(() => page.goto(`${ORIGIN}/app/sign-in`))
        yield* seen(page, "Sign in with a wallet")
        yield* press(page, /^Use a development key$/)
        yield* promise(() => page.locator("#siwe-message").waitFor())
        yield* press(page, "Sign and sign in")
        yield* promise(() => page.waitForURL(`${ORIGIN}/app/identity`))

        // The sandbox identity check, approved on the provider's page in a new tab; this tab hears of it live.
        yield* press(page, "Start the identity check")
        yield* onProviderPage(context, page, ORIGIN, "approve", "Katherine Johnson")
        yield* seen(page, "Your identity is confirmed and your card is issued.")
        const { token, address } = yield* storedSession(page)

        // USD1 from the devnet's faucet, on the card screen; the card network's view of the wallet follows it.
        yield* goTo(page, "Card")
        yield* press(page, "Add test USD1 (devnet)")
        yield* seen(page, /Added \$100\.00 of test USD1/)
        yield* eventually("the card wallet's balance followed", followedUsd1(address), (usd1) => usd1 === 100)

        // Card payments allowed once, on the card screen: the wallet signs a permit, and the chain takes it.
        yield* seen(page, /Card payments need your permission once/)
        yield* press(page, "Allow card payments")
        yield* seen(page, /Card payments may take up to \$100\.00 from your wallet/)

        // The terminal, from the navigation: "Use my card" fills the card from GET /me.
        yield* goTo(page, "Terminal")
        yield* seen(page, "A shop's card terminal on the sandbox card network")
        expect(yield* promise(() => page.getByLabel("Name", { exact: true }).inputValue())).not.toBe("")
        expect(yield* promise(() => page.getByLabel("Category").inputValue())).toBe("5814")
        expect(yield* promise(() => page.getByLabel(/^Country/).inputValue())).toBe("USA")
        yield* press(page, "Use my card")
        const card = ((yield* api("/me", token)) as { card: { number: string; expiry: string; cvv: string } }).card
        yield* seen(page, `Filled in with your card ending ${card.number.slice(-4)}.`)
        expect(yield* promise(() => page.getByLabel("Card number", { exact: true }).inputValue())).toBe(card.number)
        expect(yield* promise(() => page.getByLabel(/^Expiry date/).inputValue())).toBe(card.expiry)
        expect(yield* promise(() => page.getByLabel("CVV", { exact: true }).inputValue())).toBe(card.cvv)

        // $3.20: approved, the answer focused and announced.
        yield* promise(() => page.getByLabel("Amount (USD)").fill("3.20"))
        yield* press(page, /^Charge$/)
        expect(yield* answered(page, "Approved")).toMatch(/^Approved\s*\$3\.20 at /)
        yield* checkScreen(app, "terminal-approved")
        yield* noSidewaysScroll(page, 390)
        expect(yield* axeViolations(page), "axe-core on the terminal").toEqual([])

        // A wrong CVV: the network's verification failure, in words (the issuer was not asked).
        const wrong = String((Number(card.cvv) + 1) % 1000).padStart(3, "0")
        yield* promise(() => page.getByLabel("CVV", { exact: true }).fill(wrong))
        yield* promise(() => page.getByLabel("Amount (USD)").fill("1.00"))
        yield* press(page, /^Charge$/)
        expect(yield* answered(page, "Declined: the card number, expiry date or CVV is wrong.")).toContain(
          "Check them against the card, then charge again."
        )
        yield* checkScreen(app, "terminal-declined")
        expect(yield* axeViolations(page), "axe-core on the declined answer").toEqual([])

        const authorizations = (yield* api("/card/authorizations", token)) as ReadonlyArray<{
          approved: boolean
          amountUsd: number
        }>
        expect(authorizations.map(({ approved, amountUsd }) => ({ approved, amountUsd }))).toEqual([
          { approved: true, amountUsd: 3.2 }
        ])

        // Signed out, the terminal is still there (a shop's terminal needs no sign-in): no "Use my
        // card", and the card typed by hand, with spaces, charges.
        yield* press(page, "Sign out")
        yield* promise(() => page.waitForURL(`${ORIGIN}/app/sign-in`))
        yield* goTo(page, "Terminal")
        yield* seen(page, "A shop's card terminal on the sandbox card network")
        expect(yield* promise(() => page.getByRole("button", { name: "Use my card" }).count())).toBe(0)
        yield* promise(() =>
          page.getByLabel("Card number", { exact: true }).fill(card.number.replace(/(.{4})(?=.)/g, "$1 "))
        )
        yield* promise(() => page.getByLabel("CVV", { exact: true }).fill(card.cvv))
        yield* promise(() => page.getByLabel("Amount (USD)").fill("2.10"))
        // A month 13: the message at the expiry's field, which takes the focus; Enter charges (keyboard).
        const expiry = page.getByLabel(/^Expiry date/)
        yield* promise(() => expiry.fill("13/29"))
        yield* promise(() => expiry.press("Enter"))
        yield* seen(page, "must be the card's expiry as MM/YY")
        expect(yield* promise(() => expiry.getAttribute("aria-invalid"))).toBe("true")
        yield* promise(() =>
          page.waitForFunction("document.activeElement?.id === 'terminal-expiry'", undefined, { timeout: PAGE_WAIT_MS })
        )
        yield* promise(() => page.keyboard.press("ControlOrMeta+A"))
        yield* promise(() => page.keyboard.type(card.expiry))
        yield* promise(() => page.keyboard.press("Enter"))
        expect(yield* answered(page, "Approved")).toMatch(/^Approved\s*\$2\.10 at /)
        expect(yield* promise(() => expiry.getAttribute("aria-invalid"))).toBe("false")
        yield* checkScreen(app, "terminal-signed-out")

        // The only refused API call: none (a decline is an answer, not an error).
        expect(app.refusals).toEqual([])
      })
  )
})
