import { Context, Effect, Layer, Option, Redacted } from "effect"
import { ChainDeployment } from "../../src/chain/Chain.js"
import { ANVIL_ACCOUNT_KEYS, type Devnet, startDevnet } from "../../src/chain/Devnet.js"

/** The running test devnet, for operator helpers (`setStockPrice`, `setStockPaused`, `mintUsd1`, ...). */
export class TestDevnet extends Context.Tag("test/TestDevnet")<TestDevnet, Devnet>() {}

/**
 * A fresh, ephemeral anvil devnet with the contracts deployed, as `ChainDeployment` (relayer:
 * dev account 9, like the embedded default) and as `TestDevnet`.
 */
export const TestChain = Layer.unwrapScoped(
  Effect.gen(function* () {
    const devnet = yield* startDevnet().pipe(Effect.orDie)
    return Layer.merge(
      Layer.succeed(TestDevnet, devnet),
      Layer.succeed(ChainDeployment, {
        rpcUrl: devnet.rpcUrl,
        chainId: devnet.chainId,
        usd1: { address: devnet.usd1, decimals: 18, name: "World Liberty Financial USD", version: "1" },
        exchange: Option.some(devnet.exchange),
        stocks: devnet.stocks,
        relayerKey: Redacted.make(ANVIL_ACCOUNT_KEYS[9]!),
        local: true
      })
    )
  })
)
