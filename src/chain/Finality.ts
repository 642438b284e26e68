/**
 * CHAIN_CONFIRMATIONS: how many blocks must be on top of a transaction's (its own included) before
 * the service counts it final and stops checking it is still on the canonical chain. Settlements
 * (src/merchant) and the agent's transactions (src/agent) follow the same setting.
 */
import { Config, Duration, Effect, Option } from "effect"
import { type ChainClientShape, ChainError } from "./ChainClient.js"

/** Confirmations on a configured chain when CHAIN_CONFIRMATIONS is not set (docs/chains.md gives one per chain). */
const DEFAULT_CONFIRMATIONS = 10

const confirmationsSetting = Config.option(
  Config.integer("CHAIN_CONFIRMATIONS").pipe(
    Config.validate({
      message: "CHAIN_CONFIRMATIONS must be a whole number of blocks, 0 or more",
      validation: (blocks) => blocks >= 0
    })
  )
)

/** The confirmations to wait for on `chain`: none given, 0 on a chain that can mint (the devnet), else 10. */
export const chainConfirmations = (chain: Pick<ChainClientShape, "faucet">) =>
  Effect.map(confirmationsSetting, (blocks) =>
    BigInt(Option.getOrElse(blocks, () => (Option.isSome(chain.faucet) ? 0 : DEFAULT_CONFIRMATIONS)))
  )

/** Whether a transaction mined in `blockNumber` is final with the chain's head at `head`. */
export const isFinal = (blockNumber: bigint, head: bigint, confirmations: bigint) =>
  head - blockNumber + 1n >= confirmations

/** A chain call that does not answer within `timeout` (CHAIN_TIMEOUT) fails like an unreachable chain. */
export const withinChainTimeout =
  (timeout: Duration.Duration) =>
  <A, E, R>(call: Effect.Effect<A, E, R>) =>
    Effect.timeoutFail(call, {
      duration: timeout,
      onTimeout: () => new ChainError({ message: `no answer within ${Duration.format(timeout)}` })
    })
