/**
 * Where the chain and our contracts are. With `CHAIN_RPC_URL` unset an embedded anvil devnet is
 * started (state under `<DATA_DIR>/chain`) with our contracts deployed; otherwise everything comes
 * from configuration.
 */
import path from "node:path"
import { Config, ConfigError, Context, type Duration, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import { type Hex, parseUnits } from "viem"
import { AppConfig, addressConfig, durationConfig } from "../runtime/Config.js"
import { parseHttpUrl } from "../runtime/HttpUrl.js"
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
  /** The relayer pool's keys (RELAYER_PRIVATE_KEYS, or the one RELAYER_PRIVATE_KEY), at least one. */
  readonly relayerKeys: ReadonlyArray<Redacted.Redacted<Hex>>
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
  /** How the relayer treats a transaction the chain does not mine (see `RelayerFees`). */
  readonly relayerFees: RelayerFees
}

/**
 * How the relayer pays for gas. A relayer transaction not mined RELAYER_STUCK_AFTER after it was
 * signed is replaced with the same nonce and a higher fee, at most RELAYER_MAX_FEE_BUMPS times; no
 * fee signed ever exceeds MAX_FEE_PER_GAS (gwei; none: no cap). Its gas balance is read every
 * RELAYER_BALANCE_INTERVAL.
 */
export interface RelayerFees {
  /** Relayer sends under way at once (RELAYER_MAX_IN_FLIGHT): a node's pool holds about 16 per sender. */
  readonly maxInFlight: number
  /** How often the relayer's gas balance is read (RELAYER_BALANCE_INTERVAL). */
  readonly balanceInterval: Duration.Duration
  readonly stuckAfter: Duration.Duration
  readonly maxBumps: number
  readonly maxFeePerGas: Option.Option<bigint>
}

/** A stuck transaction's bound: a few blocks on a public chain; the embedded devnet mines at once. */
export const DEFAULT_STUCK_AFTER = "30 seconds"
export const DEVNET_STUCK_AFTER = "5 seconds"
export const DEFAULT_MAX_FEE_BUMPS = 3
export const DEFAULT_MAX_IN_FLIGHT = 16
/** A balance read per key this often is cheap; sends in between are counted against it locally. */
export const DEFAULT_BALANCE_INTERVAL = "10 seconds"

export const relayerFeesConfig = (configured: boolean) =>
  Config.all({
    balanceInterval: durationConfig("RELAYER_BALANCE_INTERVAL", DEFAULT_BALANCE_INTERVAL),
    maxInFlight: Config.integer("RELAYER_MAX_IN_FLIGHT").pipe(
      Config.validate({ message: "RELAYER_MAX_IN_FLIGHT must be 1 or more", validation: (sends) => sends >= 1 }),
      Config.withDefault(DEFAULT_MAX_IN_FLIGHT)
    ),
    stuckAfter: durationConfig("RELAYER_STUCK_AFTER", configured ? DEFAULT_STUCK_AFTER : DEVNET_STUCK_AFTER),
    maxBumps: Config.integer("RELAYER_MAX_FEE_BUMPS").pipe(
      Config.validate({
        message: "RELAYER_MAX_FEE_BUMPS must be a whole number, 0 or more",
        validation: (bumps) => bumps >= 0
      }),
      Config.withDefault(DEFAULT_MAX_FEE_BUMPS)
    ),
    maxFeePerGas: Config.option(
      Config.string("MAX_FEE_PER_GAS").pipe(
        Config.mapOrFail((text) =>
          /^\d+(\.\d{1,9})?$/.test(text.trim()) && parseUnits(text.trim(), 9) > 0n
            ? Either.right(parseUnits(text.trim(), 9))
            : Either.left(
                ConfigError.InvalidData(["MAX_FEE_PER_GAS"], "Expected MAX_FEE_PER_GAS to be a positive number of gwei")
              )
        )
      )
    )
  })

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

const isPrivateKey = (key: string) => /^0x[0-9a-fA-F]{64}$/.test(key)

/**
 * The relayer pool: RELAYER_PRIVATE_KEYS (keys separated by commas), else RELAYER_PRIVATE_KEY, else
 * `fallback` (the embedded devnet's key). A bad entry is named by its position, never echoed.
 */
export const relayerKeysConfig = (fallback: Option.Option<Hex>) =>
  Config.all([
    Config.option(Config.redacted("RELAYER_PRIVATE_KEYS")),
    Config.option(privateKeyConfig("RELAYER_PRIVATE_KEY"))
  ]).pipe(
    Config.mapOrFail(([several, one]) => {
      if (Option.isSome(several)) {
        const keys = Redacted.value(several.value)
          .split(",")
          .map((key) => key.trim())
          .filter((key) => key !== "")
        const bad = keys.findIndex((key) => !isPrivateKey(key))
        if (keys.length === 0 || bad >= 0) {
          return Either.left(
            ConfigError.InvalidData(
              ["RELAYER_PRIVATE_KEYS"],
              `Expected RELAYER_PRIVATE_KEYS to be 0x-prefixed 32-byte hex private keys separated by commas${bad >= 0 ? `; entry ${bad + 1} is not one` : ""}`
            )
          )
        }
        return Either.right([...new Set(keys.map((key) => key.toLowerCase()))].map((key) => Redacted.make(key as Hex)))
      }
      if (Option.isSome(one)) return Either.right([one.value])
      return Option.match(fallback, {
        onNone: () =>
          Either.left(
            ConfigError.MissingData(["RELAYER_PRIVATE_KEYS"], "Expected RELAYER_PRIVATE_KEYS or RELAYER_PRIVATE_KEY")
          ),
        onSome: (key) => Either.right([Redacted.make(key)])
      })
    })
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
      const relayerFees = yield* relayerFeesConfig(configured)
      const nonceGapStuckAfter = yield* durationConfig("RELAYER_NONCE_GAP_STUCK_AFTER", DEFAULT_NONCE_GAP_STUCK_AFTER)
      // The same for a configured chain and the devnet: only the defaults above differ.
      const timings = { readTimeout, pollInterval, nonceGapStuckAfter, rpcProbeInterval, relayerFees }
      if (configured) {
        const settings = yield* Config.all({
          chainId: Config.integer("CHAIN_ID"),
          usd1: addressConfig("USD1_ADDRESS"),
          usd1Decimals: Config.integer("USD1_DECIMALS").pipe(Config.withDefault(18)),
          relayerKeys: relayerKeysConfig(Option.none()),
          exchange: Config.option(addressConfig("EXCHANGE_ADDRESS")),
          stocks: stockTokensConfig
        })
        return {
          rpcUrls,
          chainId: settings.chainId,
          usd1: { address: settings.usd1, decimals: settings.usd1Decimals, ...domain },
          exchange: settings.exchange,
          stocks: settings.stocks,
          relayerKeys: settings.relayerKeys,
          local: false,
          ...timings
        } satisfies Deployment
      }
      const devnet = yield* startDevnet({ stateDir: path.join(dataDir, "chain") }).pipe(Effect.orDie)
      return {
        rpcUrls: [devnet.rpcUrl],
        chainId: devnet.chainId,
        usd1: { address: devnet.usd1, decimals: 18, ...domain },
        exchange: Option.some(devnet.exchange),
        stocks: devnet.stocks.map((stock) => ({ ...stock, platform: "devnet" })),
        relayerKeys: yield* relayerKeysConfig(Option.some(DEVNET_RELAYER_KEY)),
        local: true,
        ...timings
      } satisfies Deployment
    })
  )
}

/** The token registry of the deployment: the devnet's fixtures, or `STOCK_TOKENS`. */
export const DeployedTokens = Layer.effect(
  TokenRegistry,
  Effect.map(ChainDeployment, (deployment) => ({ chainId: deployment.chainId, tokens: deployment.stocks }))
)
