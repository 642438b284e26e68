/**
 * Driving the web app in headless Chromium: a page that counts console errors and requests leaving
 * the service's origin (those are blocked), a check run on every screen (an axe-core scan with no
 * serious or critical violation, no horizontal scroll at 375 px, screenshots at phone and desktop
 * widths written under test-artifacts/app-screens/), and an injected EIP-1193 wallet announced with
 * EIP-6963 whose key stays in the test process.
 */

import { randomBytes } from "node:crypto"
import { mkdirSync, readFileSync } from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import type { BrowserContext, Page } from "playwright-core"
import type { Hex, PrivateKeyAccount } from "viem"

/** Screenshots go here (ignored by git), one per screen and width. */
export const SCREENSHOTS = path.resolve("test-artifacts", "app-screens")
/** The longest any one wait on the page takes: only a broken app reaches it. */
export const PAGE_WAIT_MS = 120_000

const axeSource = readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8")

export interface AppPage {
  readonly page: Page
  /** Console errors and uncaught exceptions, as the page reported them. */
  readonly errors: Array<string>
  /**
   * API answers of 4xx, which Chromium logs as console errors ("Failed to load resource") although
   * the app reads and shows them (a strategy refused, no strategy yet): kept apart, as "URL status".
   */
  readonly refusals: Array<string>
  /** Requests that left the service's origin (each was blocked). */
  readonly outside: Array<string>
}

/** Blocks and counts every request of the context that leaves `origin`; `cut` fails the service's too, as a lost network would. */
export const guardOrigin = (context: BrowserContext, origin: string, cut: { value: boolean } = { value: false }) =>
  Effect.promise(async () => {
    const outside: Array<string> = []
    await context.route("**/*", (route) => {
      const url = route.request().url()
      if (url.startsWith("data:") || new URL(url).origin === origin) {
        return cut.value ? route.abort("internetdisconnected") : route.continue()
      }
      outside.push(url)
      return route.abort("blockedbyclient")
    })
    return outside
  })

/** A new page of the context that records console errors; `outside` is the context's blocked requests. */
export const watchedPage = (context: BrowserContext, outside: Array<string>) =>
  Effect.promise(async (): Promise<AppPage> => {
    const page = await context.newPage()
    page.setDefaultTimeout(PAGE_WAIT_MS)
    const errors: Array<string> = []
    const refusals: Array<string> = []
    page.on("console", (message) => {
      if (message.type() !== "error") return
      const status = /^Failed to load resource: the server responded with a status of (4\d\d)/.exec(message.text())
      const url = message.location().url
      if (status !== null && !new URL(url).pathname.startsWith("/app")) refusals.push(`${url} ${status[1]}`)
      else errors.push(message.text())
    })
    page.on("pageerror", (error) => errors.push(String(error)))
    return { page, errors, refusals, outside }
  })

interface AxeViolation {
  readonly id: string
  readonly impact: string | null
  readonly help: string
  readonly nodes: ReadonlyArray<{ readonly target: ReadonlyArray<string>; readonly failureSummary?: string }>
}

const WIDTHS = [375, 1280] as const

/**
 * The checks every screen passes: no console error so far, nothing requested outside the origin,
 * no serious or critical axe-core violation, no horizontal scroll at 375 px (nor at 1280 px), and
 * a screenshot at each width.
 */
export const checkScreen = (app: AppPage, name: string) =>
  Effect.promise(async () => {
    const { page } = app
    mkdirSync(SCREENSHOTS, { recursive: true })
    const size = page.viewportSize() ?? { width: 1280, height: 900 }
    for (const width of WIDTHS) {
      await page.setViewportSize({ width, height: 900 })
      await page.screenshot({ path: path.join(SCREENSHOTS, `${name}-${width}.png`), fullPage: true })
      const overflow = Number(await page.evaluate("document.documentElement.scrollWidth - window.innerWidth"))
      expect(overflow, `horizontal scroll on ${name} at ${width} px`).toBeLessThanOrEqual(0)
    }
    await page.setViewportSize(size)
    // Expressions as text: the test program has no DOM types.
    if ((await page.evaluate("typeof axe")) === "undefined") await page.evaluate(axeSource)
    const violations = await page.evaluate("axe.run(document).then((results) => results.violations)")
    const serious = (violations as ReadonlyArray<AxeViolation>)
      .filter((violation) => violation.impact === "serious" || violation.impact === "critical")
      .map(
        (violation) =>
          `${violation.id}: ${violation.help} (${violation.nodes.map((node) => `${node.target.join(" ")}: ${node.failureSummary}`).join("; ")})`
      )
    expect(serious, `axe-core on ${name}`).toEqual([])
    expect(app.errors, `console errors by ${name}`).toEqual([])
    expect(app.outside, `requests outside the origin by ${name}`).toEqual([])
  })

/** Runs `step` on the page; if it fails, a screenshot of the page (`failed-<time>.png`) says what was shown. */
const step = (page: Page, run: () => Promise<void>) =>
  Effect.promise(() =>
    run().catch(async (error: unknown) => {
      mkdirSync(SCREENSHOTS, { recursive: true })
      const shot = path.join(SCREENSHOTS, `failed-${Date.now()}.png`)
      await page.screenshot({ path: shot, fullPage: true }).catch(() => undefined)
      throw new Error(`${String(error)}\n(the page then: ${shot})`)
    })
  )

/** Waits until the page shows `text` (in any element), bounded. */
export const seen = (page: Page, text: string | RegExp) =>
  step(page, () => page.getByText(text).first().waitFor({ state: "visible" }))

/** Clicks the button or link with this accessible name. */
export const press = (page: Page, name: string | RegExp) =>
  step(page, () => page.getByRole("button", { name }).or(page.getByRole("link", { name })).first().click())

/** Follows a link of the app's navigation (the app routes without a reload). */
export const goTo = (page: Page, screen: string) =>
  Effect.promise(() => page.getByRole("navigation").getByRole("link", { name: screen, exact: true }).click())

/** Marks the page so that `notReloaded` can tell it was never reloaded since. */
export const markPage = (page: Page) => Effect.promise(() => page.evaluate("window.testMark = 'still the same page'"))

export const notReloaded = (page: Page) =>
  Effect.promise(() => page.evaluate("window.testMark")).pipe(
    Effect.map((mark) => expect(mark, "the page was reloaded").toBe("still the same page"))
  )

export const TEST_WALLET = { name: "Test Wallet", rdns: "com.example.testwallet" } as const

/**
 * An EIP-1193 wallet in the page, announced over EIP-6963, whose requests are answered in the test
 * process by `account` (its key never reaches the page): `eth_requestAccounts`, `eth_accounts`,
 * `eth_chainId`, `personal_sign` and `eth_signTypedData_v4`. Records the methods it was asked.
 */
export const injectWallet = (page: Page, account: PrivateKeyAccount, chainId: number) =>
  Effect.promise(async () => {
    const asked: Array<string> = []
    await page.exposeFunction("testWalletRequest", async (method: string, params: ReadonlyArray<unknown>) => {
      asked.push(method)
      switch (method) {
        case "eth_requestAccounts":
        case "eth_accounts":
          return [account.address]
        case "eth_chainId":
          return `0x${chainId.toString(16)}`
        case "personal_sign":
          return account.signMessage({ message: { raw: params[0] as Hex } })
        case "eth_signTypedData_v4": {
          const { domain, types, primaryType, message } = JSON.parse(params[1] as string)
          const { EIP712Domain: _domain, ...rest } = types
          return account.signTypedData({ domain, types: rest, primaryType, message })
        }
        default:
          throw new Error(`the test wallet does not implement ${method}`)
      }
    })
    await page.addInitScript((wallet) => {
      // The page's globals, typed here (the test program has no DOM types).
      const page = globalThis as unknown as {
        testWalletRequest: (method: string, params: unknown) => Promise<unknown>
        dispatchEvent: (event: unknown) => void
        addEventListener: (type: string, listener: () => void) => void
        CustomEvent: new (type: string, init: unknown) => unknown
        btoa: (text: string) => string
        crypto: { randomUUID: () => string }
      }
      const provider = {
        request: ({ method, params }: { method: string; params?: unknown }) =>
          page.testWalletRequest(method, params ?? []),
        on: () => provider,
        removeListener: () => provider
      }
      const svg =
        '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 8 8"><circle cx="4" cy="4" r="4" fill="#7c3aed"/></svg>'
      const icon = `data:image/svg+xml;base64,${page.btoa(svg)}`
      const info = { uuid: page.crypto.randomUUID(), name: wallet.name, icon, rdns: wallet.rdns }
      const announce = () =>
        page.dispatchEvent(
          new page.CustomEvent("eip6963:announceProvider", { detail: Object.freeze({ info, provider }) })
        )
      page.addEventListener("eip6963:requestProvider", announce)
      announce()
    }, TEST_WALLET)
    return asked
  })

/**
 * The sandbox identity provider's page, opened from the app's identity screen in a new tab: filled
 * in with `holder`'s name and a fresh document number, `outcome` submitted, and closed once it sent
 * the person back to the app at `origin`.
 */
export const onProviderPage = (
  context: BrowserContext,
  page: Page,
  origin: string,
  outcome: "approve" | "decline" | "duplicate",
  holder = "Grace Hopper"
) =>
  Effect.gen(function* () {
    const [provider] = yield* Effect.promise(() =>
      Promise.all([
        context.waitForEvent("page", { timeout: PAGE_WAIT_MS }),
        page.getByRole("link", { name: /Open the identity provider's page/ }).click()
      ])
    )
    provider.setDefaultTimeout(PAGE_WAIT_MS)
    yield* Effect.promise(() => provider.waitForLoadState())
    yield* Effect.promise(() => provider.fill("#fullName", holder))
    const initials = holder
      .split(" ")
      .map((word) => word[0])
      .join("")
    yield* Effect.promise(() => provider.fill("#documentNumber", `${initials}-${randomBytes(6).toString("hex")}`))
    // The provider sends the person back to the app (a new load of the app in that tab).
    yield* Effect.promise(() =>
      Promise.all([provider.waitForURL(`${origin}/app/identity`), provider.click(`button[value=${outcome}]`)])
    )
    yield* Effect.promise(() => provider.close())
  })
