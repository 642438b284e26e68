/**
 * The authorizations' port to the event stream: an authorization decided or changed is its holder's
 * `authorization` event, stored by the statement that stores the change, and a card's money moved
 * (debited, credited, owed, repaid) its `money` event (events/ implements it).
 */
import type { Statement } from "@effect/sql"
import { Context, type Effect } from "effect"
import type { Address } from "../chain/Address.js"
import type { CardAuthorization, CardMoney } from "./Api.js"

export interface AuthorizationEventsShape {
  /** The CTEs that store the event, for the writer's own statement (they end with `notified`). */
  readonly publishing: (address: Address, authorization: CardAuthorization) => Statement.Fragment
  /** Each card's money change is its holder's `money` event, stored in the caller's transaction. */
  readonly moneyMoved: (
    moved: ReadonlyArray<{ readonly address: Address; readonly money: CardMoney }>
  ) => Effect.Effect<void>
}

export class AuthorizationEvents extends Context.Tag("app/AuthorizationEvents")<
  AuthorizationEvents,
  AuthorizationEventsShape
>() {}
