/**
 * The signed-in account as the app holds it: the session (token, address, wallet), `GET /me`
 * (identity-check state and card) and the card's USD1 balance, kept current by the live events.
 */
import { computed, signal } from "@preact/signals"
import type { Me } from "../src/account/Api.js"
import { clientFor, run } from "./api.js"
import { onLiveEvent, startLive, stopLive } from "./live.js"
import { navigate } from "./router.js"
import { type StoredSession, storedSession, storeSession } from "./storage.js"

export const session = signal<StoredSession | undefined>(storedSession())
export const me = signal<Me | undefined>(undefined)
/** The card's USD1, as the stream's `ready` event and payments and refills tell it. */
export const cardBalance = signal<number | undefined>(undefined)
/** A notice shown on the sign-in screen (why the session ended). */
export const signInNotice = signal<string | undefined>(undefined)

export const signedIn = computed(() => session.value !== undefined)

/** The typed client with the session's token (anonymous when signed out). */
export const api = () => clientFor(session.value?.token)

onLiveEvent((event) => {
  const current = me.value
  switch (event.event) {
    case "ready":
      cardBalance.value = event.data.cardUsd1 ?? undefined
      if (current !== undefined && current.kyc !== event.data.kyc) void loadMe()
      break
    case "kyc":
      if (current !== undefined) me.value = { ...current, kyc: event.data.kyc, card: event.data.card ?? current.card }
      if (event.data.card !== null && cardBalance.value === undefined) cardBalance.value = 0
      break
    case "payment":
      if (cardBalance.value !== undefined) cardBalance.value = Math.max(0, cardBalance.value - event.data.usd)
      break
    case "refill":
      if (cardBalance.value !== undefined) cardBalance.value += event.data.usd
      break
  }
})

/** Reads `GET /me`; a refused token ends the session. */
export const loadMe = async () => {
  try {
    me.value = await run(api().account.me())
  } catch (error) {
    if ((error as { code?: string }).code === "UNAUTHORIZED") endSession("Your session has ended: sign in again.")
    else throw error
  }
}

/** The session is over (signed out, or the token was refused): forget it and go to the sign-in. */
export const endSession = (notice?: string) => {
  stopLive()
  storeSession(undefined)
  session.value = undefined
  me.value = undefined
  cardBalance.value = undefined
  signInNotice.value = notice
  navigate("/app/sign-in", { replace: true })
}

/** A new session from `POST /auth/verify` (then `loadMe` reads the account). */
export const beginSession = (started: StoredSession) => {
  storeSession(started)
  session.value = started
  signInNotice.value = undefined
  startLive(started.token, () => endSession("Your session has ended: sign in again."))
}

/** Resumes a stored session after a reload. */
export const resumeSession = async () => {
  const current = session.value
  if (current === undefined) return
  await loadMe()
  if (session.value !== undefined) startLive(current.token, () => endSession("Your session has ended: sign in again."))
}

export const signOut = async () => {
  try {
    await run(api().account.signout())
  } catch {
    // Signed out here whatever the service said: the token is forgotten.
  }
  endSession("You are signed out.")
}
