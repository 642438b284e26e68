/**
 * The authorizations' port to the event stream: an authorization decided or changed is its holder's
 * `authorization` event, stored by the statement that stores the change (events/ implements it).
 */
import type { Statement } from "@effect/sql"
import { Context } from "effect"
import type { Address } from "../chain/Address.js"
import type { CardAuthorization } from "./Api.js"

export interface AuthorizationEventsShape {
  /** The CTEs that store the event, for the writer's own statement (they end with `notified`). */
  readonly publishing: (address: Address, authorization: CardAuthorization) => Statement.Fragment
}

export class AuthorizationEvents extends Context.Tag("app/AuthorizationEvents")<
  AuthorizationEvents,
  AuthorizationEventsShape
>() {}
