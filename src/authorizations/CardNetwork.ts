/**
 * The card-network port: the card processor that asks this service, in real time, whether to approve
 * each authorization, and tells it what happened afterwards (increments, reversals, clearings,
 * refunds, expiries). An implementation verifies the processor's signature and speaks its wire
 * format; the domain below sees only `NetworkMessage`s and answers `Outcome`s.
 *
 * Two implementations, chosen by `CARD_NETWORK` at the composition root (src/Ports.ts): the built-in
 * sandbox network (the default) and Lithic. Both speak Lithic's wire format (Auth Stream Access and
 * Events API webhooks, signed with Standard Webhooks): the sandbox network signs with its own
 * development secret and delivers to the very endpoints Lithic would call, so every sandbox swipe
 * runs the production path.
 */
import { Context, Data, type Either } from "effect"
import type { DeclineReason } from "./Decide.js"
import type { HeaderBag } from "./StandardWebhooks.js"

export interface Merchant {
  readonly name: string
  /** ISO 18245 merchant category code, four digits. */
  readonly mcc: string
  readonly city: string | null
  /** ISO 3166-1 country code, as the network sends it (Lithic: alpha-3). */
  readonly country: string
}

export type Channel = "in_person" | "online"

/** A real-time request to approve an amount on a card: a new authorization or an increment of one. */
export interface AuthorizationRequest {
  readonly kind: "authorization"
  /** The network's id of this message (the same on a re-delivery): what makes a retry get the same answer. */
  readonly messageId: string
  /** The network's authorization (transaction) id; an increment names the authorization it raises. */
  readonly authorizationId: string
  /** The network's token of the card. */
  readonly cardToken: string
  /** Millionths of a dollar: a new authorization's amount, or an increment's addition. */
  readonly amount: bigint
  readonly merchant: Merchant
  readonly channel: Channel
}

/** What happened to a transaction after its authorization, one network event each. */
export interface LifecycleEvent {
  /** The network's id of the event: each is applied once. */
  readonly id: string
  /**
   * adjustment: the authorization's amount is now `amount` (an advice); reversal: `amount` is
   * released; expiry: the whole hold is released; clearing: `amount` is settled by the network
   * (debit pending); refund: `amount` comes back to the card.
   */
  readonly type: "adjustment" | "reversal" | "expiry" | "clearing" | "refund"
  readonly amount: bigint
}

/** A transaction's lifecycle webhook: its events, in order, of which any already applied are skipped. */
export interface TransactionUpdate {
  readonly kind: "update"
  readonly messageId: string
  readonly authorizationId: string
  readonly cardToken: string
  readonly merchant: Merchant
  /** The network says the transaction is settled: whatever is still held is released. */
  readonly settled: boolean
  readonly events: ReadonlyArray<LifecycleEvent>
}

export type NetworkMessage = AuthorizationRequest | TransactionUpdate

/** The issuer's answer to an authorization request, as the network is told it. */
export interface Outcome {
  readonly approved: boolean
  readonly reason: DeclineReason | null
  /** Funds available after the decision, when known (millionths). */
  readonly available: bigint | null
}

/** A message whose signature is missing, wrong or outside the replay window: 401, nothing stored. */
export class NetworkSignatureInvalid extends Data.TaggedError("NetworkSignatureInvalid")<{
  readonly reason: string
}> {}

/** A signed message this service cannot read: 400, nothing stored. */
export class NetworkMessageMalformed extends Data.TaggedError("NetworkMessageMalformed")<{
  readonly reason: string
}> {}

export interface CardNetworkShape {
  /** `sandbox` or the processor's name: stored with each authorization, shown in the start-up line. */
  readonly name: string
  /** Verifies a message's signature and replay window, then reads it. */
  readonly receive: (
    body: Uint8Array,
    headers: HeaderBag,
    nowMs: number
  ) => Either.Either<NetworkMessage, NetworkSignatureInvalid | NetworkMessageMalformed>
  /** The JSON body the network expects in answer to an authorization request. */
  readonly answer: (request: AuthorizationRequest, outcome: Outcome) => unknown
}

export class CardNetwork extends Context.Tag("app/CardNetwork")<CardNetwork, CardNetworkShape>() {}
