/**
 * Where the identity check tells that a user's state moved: a port, so that Kyc publishes without
 * knowing the event stream, which reads the identity check (events/ implements it, App.ts provides it).
 */
import { Context, type Effect } from "effect"
import type { Address } from "../chain/Address.js"
import type { KycState } from "./KycState.js"

export class KycEvents extends Context.Tag("app/KycEvents")<
  KycEvents,
  {
    /** The user's state is now `kyc`; run inside the transaction that moves it, so both commit or neither. */
    readonly stateChanged: (address: Address, kyc: KycState) => Effect.Effect<void>
  }
>() {}
