/**
 * The card program's settlement account: the spender every holder's spending allowance names, the
 * account that takes each clearing's money from the card wallet under it, sends refunds back, and
 * submits the holders' signed permits. A port: the default is an account of the service's own on the
 * chain (`ChainCardProgram`); a test may give another. Its nonces are kept by `ProgramSender`.
 */
import { Context } from "effect"
import type { ChainAccount } from "../chain/ChainClient.js"

export type CardProgramShape = Pick<ChainAccount, "address" | "nonce" | "estimate" | "sign" | "bump">

export class CardProgram extends Context.Tag("app/CardProgram")<CardProgram, CardProgramShape>() {}
