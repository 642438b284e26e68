/**
 * The card's spending allowance (docs/cards.md, "The money behind the card"): the holder asks for a
 * permit (a cap in USD and a number of days), signs it once in the wallet without gas, and hands the
 * signature back; the card program's settlement account submits it. From then on the balance
 * follower reads, block by block, what the token allows the settlement account, and authorizations
 * count it. Every chain call is bounded; a chain that does not answer is a 503, never a guess.
 */
import { randomUUID } from "node:crypto"
import { Clock, Effect, Option } from "effect"
import { type Hex, hashTypedData } from "viem"
import type { Address } from "../chain/Address.js"
import { ChainClient, type Permit, type Usd1Call } from "../chain/ChainClient.js"
import { permitTypedData } from "../chain/Eip2612.js"
import { recoverSigner } from "../chain/Secp256k1.js"
import { ChainUnavailable } from "../http/ApiError.js"
import { AppConfig } from "../runtime/Config.js"
import { allowanceFigures, allowanceState } from "./Allowance.js"
import { AllowanceRepo, type CurrentRow } from "./AllowanceRepo.js"
import {
  AllowanceNotRequested,
  AllowanceRefused,
  AllowanceSignatureInvalid,
  AllowanceView,
  CardNotFound,
  PermitTypedData
} from "./Api.js"
import { CardProgram } from "./CardProgram.js"
import { CardRepo } from "./CardRepo.js"
import { broadcastTaken, ProgramSender } from "./ProgramSender.js"

const DAY_MS = 86_400_000
const MICROS_PER_USD = 1_000_000n

/** The EIP-712 domain's own type, which `eth_signTypedData_v4` wallets expect listed. */
const EIP712_DOMAIN = [
  { name: "name", type: "string" },
  { name: "version", type: "string" },
  { name: "chainId", type: "uint256" },
  { name: "verifyingContract", type: "address" }
] as const

export class Allowances extends Effect.Service<Allowances>()("app/Allowances", {
  effect: Effect.gen(function* () {
    const repo = yield* AllowanceRepo
    const cards = yield* CardRepo
    const chain = yield* ChainClient
    const program = yield* CardProgram
    const sender = yield* ProgramSender
    const { chainTimeout } = yield* AppConfig
    const token = { chainId: chain.chainId, usd1: chain.usd1 }
    const atomicPerMicro = 10n ** BigInt(Math.max(0, chain.usd1.decimals - 6))
    const noCard = new CardNotFound({ error: "no card is issued to this account: pass the identity check first" })

    const microsOf = (atomic: bigint) => atomic / atomicPerMicro

    /** A chain call bounded by CHAIN_TIMEOUT; no answer is a 503 (counted in the chain's outage). */
    const bounded = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
      effect.pipe(
        Effect.timeoutFail({
          duration: chainTimeout,
          onTimeout: () => new ChainUnavailable({ error: "the chain did not answer in time; try again" })
        })
      )

    const cardOf = (address: Address) =>
      Effect.flatMap(cards.findRef(address), Option.match({ onNone: () => noCard, onSome: Effect.succeed }))

    const viewOf = (row: CurrentRow, now: number) => {
      const forThisProgram = row.spender !== null && row.spender.toLowerCase() === program.address.toLowerCase()
      const signed =
        row.cap === null || row.deadline === null
          ? undefined
          : { cap: row.cap, deadline: row.deadline.getTime(), seenOnChain: row.seen, forThisProgram }
      const state = allowanceState({ signed, onChain: row.onChain, now })
      const cap = signed?.forThisProgram === true ? microsOf(signed.cap) : 0n
      const figures = allowanceFigures({
        state,
        cap,
        onChain: microsOf(row.onChain),
        committed: { held: row.heldMicros, clearedPending: row.clearedPendingMicros }
      })
      return new AllowanceView({
        state,
        capUsd: Number(cap) / 1e6,
        usedUsd: Number(figures.used) / 1e6,
        remainingUsd: Number(figures.remaining) / 1e6,
        deadline: signed?.forThisProgram === true ? signed.deadline : null,
        spender: program.address,
        ...(row.txHash !== null && forThisProgram ? { tx: row.txHash } : {})
      })
    }

    /** The card's allowance as the holder sees it. */
    const view = (address: Address) =>
      Effect.gen(function* () {
        const card = yield* cardOf(address)
        const now = yield* Clock.currentTimeMillis
        return viewOf(yield* repo.current({ cardId: card.id, address, now: new Date(now) }), now)
      })

    /** A new permit for the holder to sign: the cap in USD, in force for `validDays` days. */
    const request = (address: Address, input: { readonly capUsd: number; readonly validDays: number }) =>
      Effect.gen(function* () {
        const card = yield* cardOf(address)
        const nonce = yield* bounded(
          chain
            .permitNonce(address)
            .pipe(
              Effect.catchTag(
                "ChainError",
                () => new ChainUnavailable({ error: "the chain did not answer; try again" })
              )
            )
        )
        const now = yield* Clock.currentTimeMillis
        const deadline = now + input.validDays * DAY_MS
        const permit: Permit = {
          owner: address,
          spender: program.address,
          value: BigInt(Math.round(input.capUsd * 100)) * (MICROS_PER_USD / 100n) * atomicPerMicro,
          nonce,
          deadline: BigInt(Math.floor(deadline / 1000))
        }
        yield* repo.insertRequest({
          id: randomUUID(),
          cardId: card.id,
          owner: permit.owner,
          spender: permit.spender,
          cap: permit.value,
          permitNonce: permit.nonce,
          deadline: new Date(Number(permit.deadline) * 1000),
          at: new Date(now)
        })
        const typed = permitTypedData(permit, token)
        return new PermitTypedData({
          typedData: {
            domain: typed.domain,
            types: { EIP712Domain: EIP712_DOMAIN, Permit: typed.types.Permit },
            primaryType: typed.primaryType,
            message: {
              owner: permit.owner,
              spender: permit.spender,
              value: permit.value.toString(),
              nonce: permit.nonce.toString(),
              deadline: permit.deadline.toString()
            }
          }
        })
      })

    /**
     * The holder's signature of the latest request: checked here (it must be the holder's), then
     * submitted by the settlement account, its transaction recorded before it is sent. The answer
     * is the allowance, `pending` until the follower reads it on chain.
     */
    const submit = (address: Address, signature: Hex) =>
      Effect.gen(function* () {
        const card = yield* cardOf(address)
        const now = yield* Clock.currentTimeMillis
        const open = yield* repo.openRequest(card.id)
        if (
          Option.isNone(open) ||
          open.value.deadline.getTime() <= now ||
          open.value.spender.toLowerCase() !== program.address.toLowerCase()
        ) {
          return yield* new AllowanceNotRequested({
            error:
              "no spending allowance awaits a signature: POST /card/allowance/request first, then sign what it answers"
          })
        }
        const row = open.value
        const permit: Permit = {
          owner: row.owner as Address,
          spender: row.spender as Address,
          value: row.cap,
          nonce: row.permitNonce,
          deadline: BigInt(Math.floor(row.deadline.getTime() / 1000))
        }
        const signer = yield* Effect.promise(() =>
          recoverSigner(hashTypedData(permitTypedData(permit, token)), signature).catch(() => undefined)
        )
        if (signer === undefined || signer.toLowerCase() !== address.toLowerCase()) {
          return yield* new AllowanceSignatureInvalid({
            error: "the signature is not the card holder's signature of the requested permit"
          })
        }
        const call: Usd1Call = { _tag: "Permit", permit, signature }
        const gas = yield* bounded(program.estimate(call)).pipe(
          Effect.catchTags({
            CallReverted: (refused) =>
              new AllowanceRefused({
                error: `the token refused the permit (${refused.reason}): request a new one and sign it`
              }),
            ChainError: () => new ChainUnavailable({ error: "the chain did not answer; try again" })
          })
        )
        const [sent] = yield* sender
          .sendAll(Effect.succeed([{ item: row.id, call, gas }]), ([submitted]) =>
            Effect.flatMap(repo.recordSubmitted(row.id, submitted!.signed, new Date(now)), (recorded) =>
              recorded
                ? Effect.void
                : new AllowanceNotRequested({ error: "this spending allowance was submitted already" })
            )
          )
          .pipe(
            Effect.catchTag(
              "ChainError",
              () => new ChainUnavailable({ error: "the chain did not answer; nothing was submitted: try again" })
            )
          )
        // Recorded first, it may still reach the chain: the holder sees it pending (or signs again).
        if (sent !== undefined && !broadcastTaken(sent.broadcast)) {
          yield* Effect.logWarning("a spending allowance's permit was not confirmed sent; its record is sent again")
          return yield* new ChainUnavailable({
            error:
              "the permit could not be confirmed sent (the chain did not take it); it may still reach the chain: " +
              "GET /card/allowance shows it pending until it does, and signing again replaces it"
          })
        }
        return viewOf(yield* repo.current({ cardId: card.id, address, now: new Date(now) }), now)
      })

    return { view, request, submit }
  }),
  dependencies: [AllowanceRepo.Default, CardRepo.Default]
}) {}
