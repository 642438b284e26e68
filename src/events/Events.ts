/**
 * Publishing events: what the writers call, in the transaction that makes the change the event tells
 * of, so that an event exists exactly when its change committed. The data is stored as the API
 * answers it (the statement item, the decision, the strategy), except a card's face: a `kyc` event
 * stores the state only and the stream adds the card when it sends the event (card data stays
 * encrypted at rest).
 */
import type { Statement } from "@effect/sql"
import { Effect, Layer, Schema } from "effect"
import { AgentEvents } from "../agent/AgentEvents.js"
import { DecisionItem, Strategy } from "../agent/Api.js"
import { CardAuthorization, CardMoney } from "../authorizations/Api.js"
import { AuthorizationEvents } from "../authorizations/AuthorizationEvents.js"
import { ActivityItem } from "../cards/Api.js"
import { DebtEvents } from "../cards/DebtEvents.js"
import type { Address } from "../chain/Address.js"
import { KycEvents } from "../kyc/KycEvents.js"
import type { KycState } from "../kyc/KycState.js"
import { EventRepo } from "./EventRepo.js"

/** An event as a writer publishes it. */
export type NewEvent =
  | { readonly type: "kyc"; readonly data: { readonly kyc: KycState } }
  | { readonly type: "payment" | "refill"; readonly data: ActivityItem }
  | { readonly type: "decision"; readonly data: typeof DecisionItem.Type }
  | { readonly type: "strategy"; readonly data: Strategy }
  | { readonly type: "authorization"; readonly data: CardAuthorization }
  | { readonly type: "money"; readonly data: CardMoney }

const encodeActivity = Schema.encodeSync(ActivityItem)
const encodeDecision = Schema.encodeSync(DecisionItem)
const encodeStrategy = Schema.encodeSync(Strategy)
const encodeAuthorization = Schema.encodeSync(CardAuthorization)
const encodeMoney = Schema.encodeSync(CardMoney)

/** The JSON the event stores: its data as the API encodes it. */
const stored = (event: NewEvent): unknown => {
  switch (event.type) {
    case "kyc":
      return { kyc: event.data.kyc }
    case "payment":
    case "refill":
      return encodeActivity(event.data)
    case "decision":
      return encodeDecision(event.data)
    case "strategy":
      return encodeStrategy(event.data)
    case "authorization":
      return encodeAuthorization(event.data)
    case "money":
      return encodeMoney(event.data)
  }
}

export class Events extends Effect.Service<Events>()("app/Events", {
  effect: Effect.gen(function* () {
    const repo = yield* EventRepo

    /** Publishes events, each to its user, in one statement (in the caller's transaction, if any). */
    const publishAll = (events: ReadonlyArray<{ readonly address: Address; readonly event: NewEvent }>) =>
      repo
        .publish(events.map(({ address, event }) => ({ address, type: event.type, data: stored(event) })))
        .pipe(Effect.withSpan("Events.publish", { attributes: { "events.count": events.length } }))

    const publish = (address: Address, event: NewEvent) => publishAll([{ address, event }])

    /** An event as CTEs of the writer's own statement, stored only when `onlyIf` holds (`EventRepo.publishing`). */
    const publishing = (address: Address, event: NewEvent, onlyIf?: Statement.Fragment) =>
      repo.publishing([{ address, type: event.type, data: stored(event) }], onlyIf)

    return { publish, publishAll, publishing }
  }),
  dependencies: [EventRepo.Default]
}) {}

/** The agent's port: its decisions, refills and strategies are their holders' events. */
export const AgentEventsLive = Layer.effect(
  AgentEvents,
  Effect.map(Events, (events) => AgentEvents.of({ publish: events.publish, publishAll: events.publishAll }))
)

/** The identity check's port: a user's new state is their `kyc` event. */
export const KycEventsLive = Layer.effect(
  KycEvents,
  Effect.map(Events, (events) =>
    KycEvents.of({ stateChanged: (address, kyc) => events.publish(address, { type: "kyc", data: { kyc } }) })
  )
)

/** The card authorizations' port: a decision or a change of one is its holder's `authorization` event. */
export const AuthorizationEventsLive = Layer.effect(
  AuthorizationEvents,
  Effect.map(Events, (events) =>
    AuthorizationEvents.of({
      publishing: (address, authorization) =>
        events.publishing(address, { type: "authorization", data: authorization }),
      moneyMoved: (moved) =>
        events.publishAll(moved.map(({ address, money }) => ({ address, event: { type: "money", data: money } })))
    })
  )
)

/** The card program's debts' port: a repayment of what a card owed is its holder's `money` event (`repaid`). */
export const DebtEventsLive = Layer.effect(
  DebtEvents,
  Effect.map(Events, (events) =>
    DebtEvents.of({
      repaid: (address, repaid) =>
        events.publish(address, {
          type: "money",
          data: new CardMoney({
            change: "repaid",
            amountUsd: repaid.amountUsd,
            authorizationId: null,
            eventId: null,
            tx: repaid.tx,
            owedUsd: repaid.owedUsd
          })
        })
    })
  )
)
