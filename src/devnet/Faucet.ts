/**
 * The devnet faucet: test USD1 (and gas) for a signed-in address, minted by the embedded devnet's
 * deployer. Only a chain that can mint has one (`ChainClient.faucet`).
 */
import { Duration, Effect, Option } from "effect"
import { formatUnits } from "viem"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { ChainUnavailable } from "../http/ApiError.js"

/** What one grant gives, in whole USD1. */
export const FAUCET_GRANT_USD1 = 100
/** The mints and their receipts, on a local chain: past this the chain is taken as unavailable. */
const GRANT_TIMEOUT = Duration.seconds(20)

export class DevnetFaucet extends Effect.Service<DevnetFaucet>()("app/DevnetFaucet", {
  effect: Effect.gen(function* () {
    const chain = yield* ChainClient
    const { usd1 } = chain

    /** Gives `address` FAUCET_GRANT_USD1 and gas; answers its balance after. */
    const grant = Effect.fn("DevnetFaucet.grant")(function* (address: Address) {
      const faucet = yield* Option.match(chain.faucet, {
        onNone: () => new ChainUnavailable({ error: "this chain has no faucet: it is not the embedded devnet" }),
        onSome: Effect.succeed
      })
      const balance = yield* faucet
        .fund(address, { usd1: BigInt(FAUCET_GRANT_USD1) * 10n ** BigInt(usd1.decimals), tokens: [] })
        .pipe(
          Effect.zipRight(chain.balanceOf(usd1.address, address)),
          Effect.timeoutFail({
            duration: GRANT_TIMEOUT,
            onTimeout: () => new ChainUnavailable({ error: "the devnet did not mint within 20 seconds" })
          }),
          Effect.catchTag("ChainError", (error) =>
            Effect.logWarning("devnet faucet failed", error).pipe(
              Effect.zipRight(new ChainUnavailable({ error: "the devnet did not answer: nothing was granted" }))
            )
          )
        )
      yield* Effect.logInfo("devnet faucet granted").pipe(Effect.annotateLogs({ address, usd1: FAUCET_GRANT_USD1 }))
      return {
        address,
        grantedUsd1: FAUCET_GRANT_USD1,
        usd1: Number(formatUnits(balance, usd1.decimals))
      }
    })

    return { grant }
  })
}) {}
