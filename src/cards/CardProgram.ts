/**
 * The card program's settlement account: the spender every holder's spending allowance names, the
 * account that takes each clearing's money from the card wallet under it, and that submits the
 * holders' signed permits. A port: the default is an account of the service's own on the chain
 * (`ChainCardProgram`); a test may give another.
 */
import { Context, type Effect } from "effect"
import type { Hex } from "viem"
import type { Address } from "../chain/Address.js"
import type { CallReverted, ChainError, Permit, RecordSigned, SignedTransaction } from "../chain/ChainClient.js"

export interface CardProgramShape {
  /** The settlement account's address: a permit's spender. */
  readonly address: Address
  /** Submits a holder's signed EIP-2612 permit from the settlement account (`record` persists it before it is sent). */
  readonly submitPermit: <E, R>(
    permit: Permit,
    signature: Hex,
    record: RecordSigned<E, R>
  ) => Effect.Effect<SignedTransaction, ChainError | CallReverted | E, R>
}

export class CardProgram extends Context.Tag("app/CardProgram")<CardProgram, CardProgramShape>() {}
