/**
 * The identity check: each state as a sentence and its next step. Starting (or retrying after a
 * decline) asks the service for the provider's page, which opens in a new tab; this tab learns the
 * result from the live events (a `kyc` event, with the card once approved), without reloading.
 */
import { useSignal } from "@preact/signals"
import { useEffect, useRef } from "preact/hooks"
import type { KycState } from "../../src/kyc/KycState.js"
import { api, me, signOut } from "../account.js"
import { run } from "../api.js"
import { Link } from "../router.js"
import { Button, ErrorNotice, ScreenTitle, useAction } from "../ui.js"

/** What each state means, and what to do next. */
export const KYC_SENTENCES: Readonly<Record<KycState, { readonly now: string; readonly next: string }>> = {
  none: {
    now: "You have not started the identity check yet.",
    next: "Start it: the identity provider's page asks for your name and an identity document. Your card is issued when it approves."
  },
  pending: {
    now: "Your identity check is in progress.",
    next: "Finish it on the identity provider's page. This page updates by itself when the result arrives."
  },
  approved: {
    now: "Your identity is confirmed and your card is issued.",
    next: "Your card is ready to use."
  },
  declined: {
    now: "The identity provider declined your identity check.",
    next: "You can try again, with a valid identity document whose details match what you type."
  },
  duplicate: {
    now: "This identity document already holds a card with another account, so no second card can be issued.",
    next: "Sign out, then sign in with the wallet that holds that card."
  }
}

export const Identity = () => {
  const providerUrl = useSignal<string | undefined>(undefined)
  const { busy, error, perform } = useAction()
  const providerLink = useRef<HTMLAnchorElement>(null)
  const kyc = me.value?.kyc

  /** Opens (or, while pending, finds again) the provider session; the service answers its page. */
  const start = () =>
    perform(async () => {
      const { url } = await run(api().kyc.startSession({ payload: { returnUrl: `${location.origin}/app/identity` } }))
      providerUrl.value = url
      const current = me.value
      if (current !== undefined && current.kyc !== "pending") me.value = { ...current, kyc: "pending" }
    })

  // While pending, the same session's page is asked for again (the service answers the same one).
  useEffect(() => {
    if (kyc === "pending" && providerUrl.value === undefined) void start()
  }, [kyc])
  useEffect(() => {
    if (providerUrl.value !== undefined) providerLink.current?.focus()
  }, [providerUrl.value])

  if (kyc === undefined) return <ScreenTitle>Identity check</ScreenTitle>
  const sentence = KYC_SENTENCES[kyc]
  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Identity check</ScreenTitle>
      <div class={`kyc-state kyc-${kyc}`} role="status" aria-live="polite">
        <p class="kyc-now">{sentence.now}</p>
        <p class="kyc-next">{sentence.next}</p>
      </div>
      <ErrorNotice error={error.value} />
      <div class="actions">
        {kyc === "none" ? (
          <Button class="primary" busy={busy.value} onClick={start}>
            Start the identity check
          </Button>
        ) : null}
        {kyc === "declined" ? (
          <Button class="primary" busy={busy.value} onClick={start}>
            Try the identity check again
          </Button>
        ) : null}
        {kyc === "pending" && providerUrl.value !== undefined ? (
          <a ref={providerLink} class="button primary" href={providerUrl.value} target="_blank" rel="noopener">
            Open the identity provider's page (new tab)
          </a>
        ) : null}
        {kyc === "approved" ? (
          <Link class="button primary" href="/app/card">
            See your card
          </Link>
        ) : null}
        {kyc === "duplicate" ? <Button onClick={signOut}>Sign out</Button> : null}
      </div>
    </section>
  )
}
