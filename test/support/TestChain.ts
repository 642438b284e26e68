import { Context, Effect, Layer, Option, Redacted } from "effect"
import { ChainDeployment, DEVNET_RELAYER_KEY } from "../../src/chain/Deployment.js"
import { type Devnet, startDevnet } from "../../src/chain/Devnet.js"
import { EvmChain } from "../../src/chain/EvmChain.js"
import { TokenRegistry } from "../../src/chain/Tokens.js"

/** The running test devnet, for operator helpers (`setStockPrice`, `setStockPaused`, `mintUsd1`, ...). */
export class TestDevnet extends Context.Tag("test/TestDevnet")<TestDevnet, Devnet>() {}

/**
 * A fresh, ephemeral anvil devnet with the contracts deployed, as `ChainDeployment` (relayer:
 * dev account 9, like the embedded default) and as `TestDevnet`.
 */
export const TestDevnetDeployment = Layer.unwrapScoped(
  Effect.gen(function* () {
    const devnet = yield* startDevnet().pipe(Effect.orDie)
    return Layer.merge(
      Layer.succeed(TestDevnet, devnet),
      Layer.succeed(ChainDeployment, {
        rpcUrl: devnet.rpcUrl,
        chainId: devnet.chainId,
        usd1: { address: devnet.usd1, decimals: 18, name: "World Liberty Financial USD", version: "1" },
        exchange: Option.some(devnet.exchange),
        stocks: devnet.stocks.map((stock) => ({ ...stock, platform: "devnet" })),
        relayerKey: Redacted.make(DEVNET_RELAYER_KEY),
        local: true
      })
    )
  })
)

/** The chain ports (`ChainClient`, `TokenRegistry`) on a fresh devnet, with `TestDevnet` for the test. */
export const TestChain = Layer.merge(EvmChain, TokenRegistry.fromDeployment).pipe(
  Layer.provideMerge(TestDevnetDeployment)
)
