/**
 * The card holder's web app: one page under /app whose screens are URLs (router.tsx). Reads the
 * service only through the typed client (api.ts), the live event stream (live.ts) and, to pay,
 * the standard x402 client (pay.ts).
 */
import "./app.css"
import { type JSX, render } from "preact"
import { useEffect } from "preact/hooks"
import { endSession, me, resumeSession, session, signedIn, signOut } from "./account.js"
import { config } from "./config.js"
import { connection } from "./connection.js"
import { shortHex } from "./format.js"
import { liveState } from "./live.js"
import { BASE, Link, navigate, pathOf, route } from "./router.js"
import { Agent } from "./screens/Agent.js"
import { CardScreen } from "./screens/Card.js"
import { Identity } from "./screens/Identity.js"
import { Market } from "./screens/Market.js"
import { Shop } from "./screens/Shop.js"
import { SignIn } from "./screens/SignIn.js"
import { Statement } from "./screens/Statement.js"
import { Terminal } from "./screens/Terminal.js"
import { SESSION_KEY } from "./storage.js"
import { ScreenTitle } from "./ui.js"

interface Screen {
  readonly path: string
  readonly title: string
  readonly view: () => JSX.Element
  /** Shown without a session (the market and the terminal are public). */
  readonly public?: boolean
  readonly inNavigation: () => boolean
}

const SCREENS: ReadonlyArray<Screen> = [
  { path: "/app/sign-in", title: "Sign in", view: () => <SignIn />, public: true, inNavigation: () => !signedIn.value },
  { path: "/app/identity", title: "Identity check", view: () => <Identity />, inNavigation: () => signedIn.value },
  { path: "/app/card", title: "Card", view: () => <CardScreen />, inNavigation: () => signedIn.value },
  { path: "/app/statement", title: "Statement", view: () => <Statement />, inNavigation: () => signedIn.value },
  { path: "/app/agent", title: "Agent", view: () => <Agent />, inNavigation: () => signedIn.value },
  {
    path: "/app/shop",
    title: "Shop",
    view: () => <Shop />,
    inNavigation: () => signedIn.value && config.merchant
  },
  { path: "/app/market", title: "Market", view: () => <Market />, public: true, inNavigation: () => true },
  /** A merchant's terminal on the sandbox card network: no sign-in, as a shop's terminal. */
  {
    path: "/app/terminal",
    title: "Terminal",
    view: () => <Terminal />,
    public: true,
    inNavigation: () => config.cardSandbox
  }
]

/** Where /app itself leads: the sign-in, the identity check until the card exists, then the card. */
const home = () => (!signedIn.value ? "/app/sign-in" : me.value?.kyc === "approved" ? "/app/card" : "/app/identity")

const NotFound = () => (
  <section aria-labelledby="screen-title">
    <ScreenTitle>Page not found</ScreenTitle>
    <p>There is no screen at this address.</p>
    <Link class="button" href={BASE}>
      Go to the app
    </Link>
  </section>
)

const Banners = () => (
  <>
    {connection.value === "lost" ? (
      <div class="banner lost" role="alert">
        The connection to the service is lost. The app keeps trying and carries on by itself when it is back.
      </div>
    ) : null}
    {liveState.value === "replaced" ? (
      <div class="banner lost" role="alert">
        Live updates stopped in this tab: this account has newer tabs open. Reload the page to resume them here.
      </div>
    ) : null}
    {config.devnet && session.value?.wallet.kind === "development" ? (
      // A landmark of its own, as all the page's content sits in one.
      <aside class="banner development" aria-label="Development key">
        Signed in with a development key: for this local devnet only.
      </aside>
    ) : null}
  </>
)

const App = () => {
  const path = pathOf(route.value)
  const screen = SCREENS.find((candidate) => candidate.path === path)
  const atHome = path === BASE || path === `${BASE}/`
  const needsSignIn = screen !== undefined && screen.public !== true && !signedIn.value

  useEffect(() => {
    if (atHome && (!signedIn.value || me.value !== undefined)) navigate(home(), { replace: true })
    else if (path === "/app/sign-in" && signedIn.value && me.value !== undefined) navigate(home(), { replace: true })
  }, [path, signedIn.value, me.value])
  // A new screen: its title names the tab, and focus goes to its heading.
  useEffect(() => {
    document.title = `${needsSignIn ? "Sign in" : (screen?.title ?? "Card")} · Card`
    document.getElementById("screen-title")?.focus()
  }, [path, needsSignIn])

  const waitingForAccount = signedIn.value && me.value === undefined && screen?.public !== true
  return (
    <>
      <a class="skip" href="#main">
        Skip to the content
      </a>
      <header class="top">
        <Link class="brand" href={BASE}>
          Card
        </Link>
        <nav aria-label="Screens">
          <ul>
            {SCREENS.filter((candidate) => candidate.inNavigation()).map((candidate) => (
              <li key={candidate.path}>
                <Link href={candidate.path} current={candidate.path === path}>
                  {candidate.title}
                </Link>
              </li>
            ))}
          </ul>
        </nav>
        {session.value === undefined ? null : (
          <div class="who">
            <span class="address" title={session.value.address}>
              {shortHex(session.value.address)}
            </span>
            <span class="live" data-live={liveState.value}>
              {liveState.value === "open" ? "Live" : liveState.value === "connecting" ? "Connecting…" : "Not live"}
            </span>
            <button type="button" class="small on-dark" onClick={signOut}>
              Sign out
            </button>
          </div>
        )}
      </header>
      <Banners />
      <main id="main">
        {needsSignIn ? (
          <SignIn next={route.value} />
        ) : waitingForAccount ? (
          <p role="status">Loading your account…</p>
        ) : screen !== undefined ? (
          screen.view()
        ) : atHome ? null : (
          <NotFound />
        )}
      </main>
    </>
  )
}

const root = document.getElementById("root")
if (root !== null) {
  root.textContent = ""
  render(<App />, root)
}
void resumeSession().catch(() => {
  // Shown by the screens: a lost connection has its banner.
})
// Keeps the tab's session in step with another tab that signed out (the stored session is gone).
window.addEventListener("storage", (event) => {
  if (event.key === SESSION_KEY && event.newValue === null && session.value !== undefined) {
    endSession("You signed out in another tab.")
  }
})
