/**
 * The live event stream (`GET /me/events`), the one place the app reads it: screens subscribe with
 * `onLiveEvent` and never poll. Events are the API's own (src/events/Api.ts): `ready` first (the
 * identity-check state, the card's balance), then `kyc`, `payment`, `refill`, `decision` and
 * `strategy` as changes commit.
 *
 * Until the service's stream lands (issue 19), the app says live updates are unavailable and screens
 * offer their Refresh buttons instead.
 */
import { signal } from "@preact/signals"
import type { DecisionItem, Strategy } from "../src/agent/Api.js"
import type { ActivityItem } from "../src/cards/Api.js"
import type { Card } from "../src/cards/Card.js"
import type { KycState } from "../src/kyc/KycState.js"

export type LiveEvent =
  | {
      readonly event: "ready"
      readonly id: number
      readonly data: { readonly kyc: KycState; readonly cardUsd1: number | null; readonly lastEventId: number }
    }
  | {
      readonly event: "kyc"
      readonly id: number
      readonly data: { readonly kyc: KycState; readonly card: Card | null }
    }
  | { readonly event: "payment" | "refill"; readonly id: number; readonly data: ActivityItem }
  | { readonly event: "decision"; readonly id: number; readonly data: typeof DecisionItem.Type }
  | { readonly event: "strategy"; readonly id: number; readonly data: Strategy }

/** off: signed out; connecting; open: events arrive; unavailable: this service has no stream. */
export type LiveState = "off" | "connecting" | "open" | "unavailable"

export const liveState = signal<LiveState>("off")

const listeners = new Set<(event: LiveEvent) => void>()

/** Calls `listener` with every event until the returned function is called. */
export const onLiveEvent = (listener: (event: LiveEvent) => void) => {
  listeners.add(listener)
  return () => {
    listeners.delete(listener)
  }
}

/** Opens the signed-in user's stream. */
export const startLive = (_token: string, _onSignedOut: () => void) => {
  liveState.value = "unavailable"
}

/** Closes the stream (sign-out). */
export const stopLive = () => {
  liveState.value = "off"
}
