/**
 * Where the chain and our contracts are. With `CHAIN_RPC_URL` unset an embedded anvil devnet is
 * started (state under `<DATA_DIR>/chain`) with our contracts deployed; otherwise everything comes
 * from configuration.
 */
import path from "node:path"
import { Config, ConfigError, Context, type Duration, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import type { Hex } from "viem"
import { parseHttpUrl } from "../http/HttpUrl.js"
import { AppConfig, addressConfig, durationConfig } from "../runtime/Config.js"
import { Address } from "./Address.js"
import type { Usd1Token } from "./ChainClient.js"
import { ANVIL_ACCOUNT_KEYS, startDevnet } from "./Devnet.js"
import { type StockToken, TokenRegistry } from "./Tokens.js"

export interface Deployment {
  /** The chain's JSON-RPC endpoints, in order of preference (at least one). */
  readonly rpcUrls: ReadonlyArray<string>
  readonly chainId: number
  readonly usd1: Usd1Token
  readonly exchange: Option.Option<Address>
  readonly stocks: ReadonlyArray<StockToken>
  readonly relayerKey: Redacted.Redacted<Hex>
  /** True for the embedded devnet: demo funds (the faucet). */
  readonly local: boolean
  /** The longest one read may take (CHAIN_TIMEOUT). */
  readonly readTimeout: Duration.Duration
  /** How often the block watcher reads the head while a receipt is awaited (CHAIN_POLL_INTERVAL). */
  readonly pollInterval: Duration.Duration
  /** A relayer nonce gap open this long makes the service not ready (RELAYER_NONCE_GAP_STUCK_AFTER). */
  readonly nonceGapStuckAfter: Duration.Duration
  /** How often each of several endpoints is probed (CHAIN_RPC_PROBE_INTERVAL). */
  readonly rpcProbeInterval: Duration.Duration
}

/**
 * The endpoints of CHAIN_RPC_URL (one URL, or several separated by commas) then CHAIN_RPC_URLS,
 * duplicates dropped; none when neither is set. A bad entry is named by its position only: the
 * URLs of RPC providers hold API keys, which must not reach a log.
 */
export const parseRpcUrls = (settings: ReadonlyArray<{ readonly name: string; readonly text: string }>) => {
  const urls: Array<string> = []
  for (const { name, text } of settings) {
    const entries = text
      .split(",")
      .map((entry) => entry.trim())
      .filter((entry) => entry !== "")
    if (entries.length === 0) {
      return Either.left(ConfigError.InvalidData([name], `Expected ${name} to be http(s) URLs separated by commas`))
    }
    for (const [i, entry] of entries.entries()) {
      if (parseHttpUrl(entry) === undefined) {
        return Either.left(
          ConfigError.InvalidData(
            [name],
            `Expected ${name} to be http(s) URLs separated by commas; entry ${i + 1} of ${entries.length} is not one`
          )
        )
      }
      if (!urls.includes(entry)) urls.push(entry)
    }
  }
  return Either.right(urls as ReadonlyArray<string>)
}

const rpcUrlsConfig = Config.all([
  Config.option(Config.string("CHAIN_RPC_URL")),
  Config.option(Config.string("CHAIN_RPC_URLS"))
]).pipe(
  Config.mapOrFail(([single, several]) =>
    parseRpcUrls([
      ...Option.toArray(Option.map(single, (text) => ({ name: "CHAIN_RPC_URL", text }))),
      ...Option.toArray(Option.map(several, (text) => ({ name: "CHAIN_RPC_URLS", text })))
    ])
  )
)

const StockTokenConfig = Schema.Array(
  Schema.Struct({
    symbol: Schema.String.pipe(Schema.pattern(/^[A-Za-z0-9.]{1,12}$/)),
    ticker: Schema.optional(Schema.String),
    name: Schema.optional(Schema.String),
    address: Address,
    feed: Address,
    decimals: Schema.optionalWith(Schema.Int.pipe(Schema.between(0, 36)), { default: () => 18 }),
    platform: Schema.optionalWith(Schema.String.pipe(Schema.pattern(/^[a-z0-9-]{1,32}$/)), { default: () => "onchain" })
  })
)

const stockTokensConfig = Config.string("STOCK_TOKENS").pipe(
  Config.mapOrFail((text) => {
    const decoded = Schema.decodeUnknownEither(Schema.parseJson(StockTokenConfig))(text)
    return Either.isRight(decoded)
      ? Either.right(
          decoded.right.map(
            (s): StockToken => ({
              symbol: s.symbol.toUpperCase(),
              ticker: s.ticker ?? s.symbol.toUpperCase(),
              name: s.name ?? s.symbol.toUpperCase(),
              address: s.address,
              feed: s.feed,
              decimals: s.decimals,
              platform: s.platform
            })
          )
        )
      : Either.left(
          ConfigError.InvalidData(
            ["STOCK_TOKENS"],
            'Expected STOCK_TOKENS to be a JSON array of {"symbol","address","feed"[,"ticker","name","decimals","platform"]}'
          )
        )
  }),
  Config.withDefault([] as ReadonlyArray<StockToken>)
)

const privateKeyConfig = (name: string) =>
  Config.redacted(name).pipe(
    Config.mapOrFail((key) =>
      /^0x[0-9a-fA-F]{64}$/.test(Redacted.value(key))
        ? Either.right(key as Redacted.Redacted<Hex>)
        : Either.left(ConfigError.InvalidData([name], `Expected ${name} to be a 0x-prefixed 32-byte hex private key`))
    )
  )

const usd1Domain = Config.all({
  name: Config.string("USD1_EIP712_NAME").pipe(Config.withDefault("World Liberty Financial USD")),
  version: Config.string("USD1_EIP712_VERSION").pipe(Config.withDefault("1"))
})

/** The head poll on a configured chain, and on the embedded devnet (which mines within milliseconds). */
export const DEFAULT_POLL_INTERVAL = "1 second"
export const DEVNET_POLL_INTERVAL = "5 millis"
/** How often each of several RPC endpoints is probed (a provider bills each probe as one call). */
export const DEFAULT_RPC_PROBE_INTERVAL = "2 seconds"
export const DEFAULT_NONCE_GAP_STUCK_AFTER = "30 seconds"

/** The devnet's relayer: the last standard account, so that it never races the deployer's nonces. */
export const DEVNET_RELAYER_KEY = ANVIL_ACCOUNT_KEYS[9]!

export class ChainDeployment extends Context.Tag("app/ChainDeployment")<ChainDeployment, Deployment>() {
  static readonly layer = Layer.scoped(
    ChainDeployment,
    Effect.gen(function* () {
      const rpcUrls = yield* rpcUrlsConfig
      const configured = rpcUrls.length > 0
      const domain = yield* usd1Domain
      const { dataDir, chainTimeout: readTimeout } = yield* AppConfig
      // The embedded devnet mines a transaction within milliseconds; a chain's blocks take seconds.
      const pollInterval = yield* durationConfig(
        "CHAIN_POLL_INTERVAL",
        configured ? DEFAULT_POLL_INTERVAL : DEVNET_POLL_INTERVAL
      )
      const rpcProbeInterval = yield* durationConfig("CHAIN_RPC_PROBE_INTERVAL", DEFAULT_RPC_PROBE_INTERVAL)
      const nonceGapStuckAfter = yield* durationConfig("RELAYER_NONCE_GAP_STUCK_AFTER", DEFAULT_NONCE_GAP_STUCK_AFTER)
      if (configured) {
        const settings = yield* Config.all({
          chainId: Config.integer("CHAIN_ID"),
          usd1: addressConfig("USD1_ADDRESS"),
          usd1Decimals: Config.integer("USD1_DECIMALS").pipe(Config.withDefault(18)),
          relayerKey: privateKeyConfig("RELAYER_PRIVATE_KEY"),
          exchange: Config.option(addressConfig("EXCHANGE_ADDRESS")),
          stocks: stockTokensConfig
        })
        return {
          rpcUrls,
          chainId: settings.chainId,
          usd1: { address: settings.usd1, decimals: settings.usd1Decimals, ...domain },
          exchange: settings.exchange,
          stocks: settings.stocks,
          relayerKey: settings.relayerKey,
          local: false,
          readTimeout,
          pollInterval,
          nonceGapStuckAfter,
          rpcProbeInterval
        } satisfies Deployment
      }
      const devnet = yield* startDevnet({ stateDir: path.join(dataDir, "chain") }).pipe(Effect.orDie)
      return {
        rpcUrls: [devnet.rpcUrl],
        chainId: devnet.chainId,
        usd1: { address: devnet.usd1, decimals: 18, ...domain },
        exchange: Option.some(devnet.exchange),
        stocks: devnet.stocks.map((stock) => ({ ...stock, platform: "devnet" })),
        relayerKey: Redacted.make(DEVNET_RELAYER_KEY),
        local: true,
        readTimeout,
        pollInterval,
        nonceGapStuckAfter,
        rpcProbeInterval
      } satisfies Deployment
    })
  )
}

/** The token registry of the deployment: the devnet's fixtures, or `STOCK_TOKENS`. */
export const DeployedTokens = Layer.effect(
  TokenRegistry,
  Effect.map(ChainDeployment, (deployment) => ({ chainId: deployment.chainId, tokens: deployment.stocks }))
)
