import { Context, Duration, Effect, Layer, Option, type Redacted } from "effect"
import { createPublicClient, type Hex, http, parseAbiItem } from "viem"
import {
  ChainDeployment,
  DEFAULT_NONCE_GAP_STUCK_AFTER,
  DEFAULT_RPC_PROBE_INTERVAL,
  DEVNET_POLL_INTERVAL,
  DEVNET_RELAYER_KEY,
  DeployedTokens,
  type RelayerFees,
  relayerFeesConfig,
  relayerKeysConfig
} from "../../src/chain/Deployment.js"
import { type Devnet, startDevnet } from "../../src/chain/Devnet.js"
import { EvmChain } from "../../src/chain/EvmChain.js"
import { type RpcProxy, startRpcProxy } from "./RpcProxy.js"
import { startTcpProxy, type TcpProxy } from "./TcpProxy.js"
import { temporaryDatabaseUrl } from "./TestDatabase.js"

/** A devnet and an empty database of their own, for service processes to share; both end with the scope. */
export const devnetWithDatabase = Effect.all({
  devnet: startDevnet().pipe(Effect.orDie),
  databaseUrl: temporaryDatabaseUrl
})

/** One JSON-RPC call to the devnet (anvil's own methods too: `evm_setAutomine`, `anvil_setBalance`, ...). */
export const devnetRpc = (devnet: Devnet, method: string, params: ReadonlyArray<unknown> = []) =>
  Effect.promise(() =>
    fetch(devnet.rpcUrl, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params })
    }).then((response) => response.json())
  )

/** The devnet's USD1 `Transfer` logs into `to` (one address or any of several), from its first block. */
export const usd1TransfersTo = (devnet: Pick<Devnet, "rpcUrl" | "usd1">, to: Hex | ReadonlyArray<Hex>) =>
  Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).getLogs({
      address: devnet.usd1,
      event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
      args: { to: typeof to === "string" ? to : [...to] },
      fromBlock: 0n
    })
  )

/** The running test devnet, for operator helpers (`setStockPrice`, `setStockPaused`, `mintUsd1`, ...). */
export class TestDevnet extends Context.Tag("test/TestDevnet")<TestDevnet, Devnet>() {}

/** The proxy between the chain client and the devnet: a test stalls or cuts it to fail the chain. */
export class ChainProxy extends Context.Tag("test/ChainProxy")<ChainProxy, TcpProxy>() {}

/** The relayer settings a test gives (RELAYER_* as in the service), the devnet's relayer key unless RELAYER_PRIVATE_KEYS names others. */
const relayerSettings = Effect.all({
  fees: relayerFeesConfig(false),
  keys: relayerKeysConfig(Option.some(DEVNET_RELAYER_KEY))
}).pipe(Effect.orDie)

/** The devnet as `ChainDeployment` (relayer: dev account 9, like the embedded default), reached at `rpcUrl`. */
const deploymentOf = (
  devnet: Devnet,
  rpcUrl: string | ReadonlyArray<string>,
  readTimeout: Duration.DurationInput,
  relayer: { readonly fees: RelayerFees; readonly keys: ReadonlyArray<Redacted.Redacted<Hex>> },
  rpcProbeInterval: Duration.DurationInput = DEFAULT_RPC_PROBE_INTERVAL,
  pollInterval: Duration.DurationInput = DEVNET_POLL_INTERVAL
) =>
  ChainDeployment.of({
    rpcUrls: typeof rpcUrl === "string" ? [rpcUrl] : rpcUrl,
    chainId: devnet.chainId,
    usd1: { address: devnet.usd1, decimals: 18, name: "World Liberty Financial USD", version: "1" },
    exchange: Option.some(devnet.exchange),
    stocks: devnet.stocks.map((stock) => ({ ...stock, platform: "devnet" })),
    relayerKeys: relayer.keys,
    local: true,
    readTimeout: Duration.decode(readTimeout),
    pollInterval: Duration.decode(pollInterval),
    nonceGapStuckAfter: Duration.decode(DEFAULT_NONCE_GAP_STUCK_AFTER),
    rpcProbeInterval: Duration.decode(rpcProbeInterval),
    relayerFees: relayer.fees
  })

/** A fresh, ephemeral anvil devnet with the contracts deployed, as `ChainDeployment` and as `TestDevnet`. */
export const TestDevnetDeployment = Layer.unwrapScoped(
  Effect.gen(function* () {
    const devnet = yield* startDevnet().pipe(Effect.orDie)
    const relayer = yield* relayerSettings
    return Layer.merge(
      Layer.succeed(TestDevnet, devnet),
      Layer.succeed(ChainDeployment, deploymentOf(devnet, devnet.rpcUrl, "4 seconds", relayer))
    )
  })
)

/** The chain ports (`ChainClient`, `TokenRegistry`) on a fresh devnet, with `TestDevnet` for the test. */
export const TestChain = Layer.merge(EvmChain, DeployedTokens).pipe(Layer.provideMerge(TestDevnetDeployment))

/**
 * `TestChain` reaching the devnet through a TCP proxy (`ChainProxy`) that a test stalls or cuts;
 * reads give up after `readTimeout` (CHAIN_TIMEOUT). `TestDevnet` is the devnet itself, unproxied.
 */
export const proxiedTestChain = (readTimeout: Duration.DurationInput) =>
  Layer.merge(EvmChain, DeployedTokens).pipe(
    Layer.provideMerge(
      Layer.unwrapScoped(
        Effect.gen(function* () {
          const devnet = yield* startDevnet().pipe(Effect.orDie)
          const proxy = yield* startTcpProxy({ host: "127.0.0.1", port: Number(new URL(devnet.rpcUrl).port) })
          const relayer = yield* relayerSettings
          return Layer.mergeAll(
            Layer.succeed(TestDevnet, devnet),
            Layer.succeed(ChainProxy, proxy),
            Layer.succeed(ChainDeployment, deploymentOf(devnet, proxy.url(devnet.rpcUrl), readTimeout, relayer))
          )
        })
      )
    )
  )

/** The JSON-RPC endpoints in front of the one devnet, in the order the chain client has them. */
export class ChainEndpoints extends Context.Tag("test/ChainEndpoints")<ChainEndpoints, ReadonlyArray<RpcProxy>>() {}

/**
 * `TestChain` reaching the devnet through `count` JSON-RPC endpoints (`ChainEndpoints`), each a
 * proxy of the same node that a test kills, stalls or makes drop transactions: providers of one
 * chain. Each endpoint is probed every `probeInterval`.
 */
export const multiEndpointTestChain = (
  count: number,
  readTimeout: Duration.DurationInput,
  probeInterval: Duration.DurationInput,
  /** CHAIN_POLL_INTERVAL: the devnet's 5 ms unless given (a configured chain's is about half a block). */
  pollInterval: Duration.DurationInput = DEVNET_POLL_INTERVAL
) =>
  Layer.merge(EvmChain, DeployedTokens).pipe(
    Layer.provideMerge(
      Layer.unwrapScoped(
        Effect.gen(function* () {
          const devnet = yield* startDevnet().pipe(Effect.orDie)
          const endpoints = yield* Effect.forEach(Array.from({ length: count }), () => startRpcProxy(devnet.rpcUrl))
          const relayer = yield* relayerSettings
          return Layer.mergeAll(
            Layer.succeed(TestDevnet, devnet),
            Layer.succeed(ChainEndpoints, endpoints),
            Layer.succeed(
              ChainDeployment,
              deploymentOf(
                devnet,
                endpoints.map((endpoint) => endpoint.url),
                readTimeout,
                relayer,
                probeInterval,
                pollInterval
              )
            )
          )
        })
      )
    )
  )

/** Runs `effect` with the chain's proxy in `mode`, forwarding again afterwards whatever happens. */
export const withNode = <A, E, R>(mode: "stall" | "refuse", effect: Effect.Effect<A, E, R>) =>
  Effect.flatMap(ChainProxy, (proxy) =>
    Effect.acquireUseRelease(
      Effect.sync(() => proxy.setMode(mode)),
      () => effect,
      () => Effect.sync(() => proxy.setMode("forward"))
    )
  )
