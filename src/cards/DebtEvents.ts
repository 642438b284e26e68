/**
 * Where the card program tells a holder that what their card owed was repaid: a port, so that cards/
 * publishes without knowing the event stream (events/ implements it as the holder's `money` event,
 * change `repaid`; App.ts provides it).
 */
import { Context, type Effect } from "effect"
import type { Address } from "../chain/Address.js"

/** A repayment as the holder is told of it: what was repaid, in which transaction, and what is still owed (0: the card thaws). */
export interface Repaid {
  readonly amountUsd: number
  readonly tx: string
  readonly owedUsd: number
}

export class DebtEvents extends Context.Tag("app/DebtEvents")<
  DebtEvents,
  {
    /** The holder's event, in the caller's transaction (if any): both commit or neither. */
    readonly repaid: (address: Address, repaid: Repaid) => Effect.Effect<void>
  }
>() {}
