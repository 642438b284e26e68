/**
 * Where the agent tells a card holder what it did (a decision, a refill, a new strategy): a port, so
 * that the agent publishes without knowing the event stream, whose frames are the agent's own
 * schemas (events/ implements it, App.ts provides it).
 */
import { Context, type Effect } from "effect"
import type { ActivityItem } from "../cards/Api.js"
import type { Address } from "../chain/Address.js"
import type { DecisionItem, Strategy } from "./Api.js"

export type AgentEvent =
  | { readonly type: "decision"; readonly data: typeof DecisionItem.Type }
  | { readonly type: "refill"; readonly data: ActivityItem }
  | { readonly type: "strategy"; readonly data: Strategy }

export class AgentEvents extends Context.Tag("app/AgentEvents")<
  AgentEvents,
  {
    /** Each event to its user, in one statement, in the caller's transaction (if any): both commit or neither. */
    readonly publishAll: (
      events: ReadonlyArray<{ readonly address: Address; readonly event: AgentEvent }>
    ) => Effect.Effect<void>
    readonly publish: (address: Address, event: AgentEvent) => Effect.Effect<void>
  }
>() {}
