import { Schema } from "effect"

/** Identity-check state of a user, as the seed names it. */
export const KycState = Schema.Literal("none", "pending", "approved", "declined", "duplicate").annotations({
  identifier: "KycState"
})
export type KycState = typeof KycState.Type

/**
 * The status of one provider session. Providers' own vocabularies map onto it (see each adapter);
 * `expired` covers both expiry and abandonment.
 */
export const SessionStatus = Schema.Literal("pending", "approved", "declined", "duplicate", "expired")
export type SessionStatus = typeof SessionStatus.Type

/** pending < every terminal result. */
const rank = (status: SessionStatus): number => (status === "pending" ? 0 : 1)

/**
 * Whether a session at `current` moves to `next`. Only forward: pending to a terminal result.
 * A terminal result is final, so a late, repeated or out-of-order event never overwrites it, and
 * pending to pending changes nothing.
 */
export const advances = (current: SessionStatus, next: SessionStatus): boolean => rank(next) > rank(current)

/** The user's state once their current session has `status`: expiry and abandonment mean start again. */
export const accountStateOf = (status: SessionStatus): KycState => (status === "expired" ? "none" : status)

/** States from which `POST /kyc/session` opens a new provider session. */
export const canStartSession = (state: KycState): boolean => state === "none" || state === "declined"
