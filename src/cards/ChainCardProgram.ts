/**
 * The default `CardProgram`: an account of the service's own on the chain, its key `CARD_PROGRAM_KEY`
 * (a development file in DATA_DIR when unset, like the other secrets). On a chain with a faucet (the
 * embedded devnet) it is given gas at start; elsewhere the operator funds it (docs/cards.md).
 */
import { randomBytes } from "node:crypto"
import { Effect, Layer, Option, Redacted } from "effect"
import type { Hex } from "viem"
import { ChainClient } from "../chain/ChainClient.js"
import { type SecretName, Secrets } from "../runtime/Secrets.js"
import { CardProgram } from "./CardProgram.js"

export const CARD_PROGRAM_KEY: SecretName = {
  variable: "CARD_PROGRAM_KEY",
  file: "card-program.key",
  generate: () => `0x${randomBytes(32).toString("hex")}`
}

/** The settlement account of `key` on the chain, given gas first where the chain has a faucet. */
export const chainCardProgram = (key: Redacted.Redacted<Hex>) =>
  Layer.effect(
    CardProgram,
    Effect.gen(function* () {
      const chain = yield* ChainClient
      const account = chain.account(key)
      if (Option.isSome(chain.faucet)) {
        yield* Effect.orDie(chain.faucet.value.fund(account.address, { usd1: 0n, tokens: [] }))
      }
      const { address, nonce, estimate, sign, bump } = account
      return CardProgram.of({ address, nonce, estimate, sign, bump })
    })
  )

export const ChainCardProgram = Layer.unwrapEffect(
  Effect.gen(function* () {
    const key = Redacted.value(yield* (yield* Secrets).secret(CARD_PROGRAM_KEY))
    if (!/^0x[0-9a-fA-F]{64}$/.test(key)) {
      return yield* Effect.dieMessage("CARD_PROGRAM_KEY must be a private key: 0x and 64 hex digits")
    }
    return chainCardProgram(Redacted.make(key as Hex))
  })
)
