/**
 * Where the card program tells a holder that what their card owed was repaid: a port, so that cards/
 * publishes without knowing the event stream (events/ implements it, App.ts provides it).
 */
import { Context, type Effect } from "effect"
import type { Address } from "../chain/Address.js"
import type { CardRepayment } from "./Api.js"

export class DebtEvents extends Context.Tag("app/DebtEvents")<
  DebtEvents,
  {
    /** The holder's `repayment` event, in the caller's transaction (if any): both commit or neither. */
    readonly repaid: (address: Address, repayment: CardRepayment) => Effect.Effect<void>
  }
>() {}
