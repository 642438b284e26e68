/**
 * The chain this service talks to, and the viem clients for it.
 *
 * `ChainDeployment` says where things are: with `CHAIN_RPC_URL` unset an embedded anvil devnet is
 * started (state under `<DATA_DIR>/chain`) with our contracts deployed; otherwise the addresses
 * come from configuration. `ChainClient` reads tokens and relays transactions from one relayer
 * account through one ordered send queue.
 */
import path from "node:path"
import { Config, ConfigError, Context, Data, Effect, Either, Layer, Option, Redacted, Schema } from "effect"
import {
  type Abi,
  type Chain,
  type ContractFunctionArgs,
  type ContractFunctionName,
  createPublicClient,
  createWalletClient,
  defineChain,
  encodeFunctionData,
  erc20Abi,
  type Hash,
  type Hex,
  http,
  keccak256,
  type TransactionReceipt
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { AppConfig, addressConfig } from "../Config.js"
import { Address } from "./Address.js"
import { ANVIL_ACCOUNT_KEYS, startDevnet } from "./Devnet.js"

export interface StockToken {
  readonly symbol: string
  readonly ticker: string
  readonly name: string
  readonly address: Address
  /** Chainlink AggregatorV3-compatible feed, USD per whole token. */
  readonly feed: Address
  readonly decimals: number
  /**
   * Where the token trades, as shown in market data. STOCK_TOKENS defaults it to "onchain"; the
   * devnet's tokens leave it unset and the Market service calls them "devnet".
   */
  readonly platform?: string
}

export interface Deployment {
  readonly rpcUrl: string
  readonly chainId: number
  readonly usd1: {
    readonly address: Address
    readonly decimals: number
    /** EIP-712 domain of the token, for EIP-3009 authorizations. */
    readonly name: string
    readonly version: string
  }
  readonly exchange: Option.Option<Address>
  readonly stocks: ReadonlyArray<StockToken>
  readonly relayerKey: Redacted.Redacted<Hex>
  /** True for the embedded devnet: fast polling, demo funds. */
  readonly local: boolean
}

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

/** The devnet's relayer: the last standard account, so that it never races the deployer's nonces. */
const DEVNET_RELAYER_KEY = ANVIL_ACCOUNT_KEYS[9]!

export class ChainDeployment extends Context.Tag("app/ChainDeployment")<ChainDeployment, Deployment>() {
  static readonly layer = Layer.scoped(
    ChainDeployment,
    Effect.gen(function* () {
      const rpcUrl = yield* Config.option(Config.string("CHAIN_RPC_URL"))
      const domain = yield* usd1Domain
      if (Option.isSome(rpcUrl)) {
        const settings = yield* Config.all({
          chainId: Config.integer("CHAIN_ID"),
          usd1: addressConfig("USD1_ADDRESS"),
          usd1Decimals: Config.integer("USD1_DECIMALS").pipe(Config.withDefault(18)),
          relayerKey: privateKeyConfig("RELAYER_PRIVATE_KEY"),
          exchange: Config.option(addressConfig("EXCHANGE_ADDRESS")),
          stocks: stockTokensConfig
        })
        return {
          rpcUrl: rpcUrl.value,
          chainId: settings.chainId,
          usd1: { address: settings.usd1, decimals: settings.usd1Decimals, ...domain },
          exchange: settings.exchange,
          stocks: settings.stocks,
          relayerKey: settings.relayerKey,
          local: false
        } satisfies Deployment
      }
      const { dataDir } = yield* AppConfig
      const devnet = yield* startDevnet({ stateDir: path.join(dataDir, "chain") }).pipe(Effect.orDie)
      return {
        rpcUrl: devnet.rpcUrl,
        chainId: devnet.chainId,
        usd1: { address: devnet.usd1, decimals: 18, ...domain },
        exchange: Option.some(devnet.exchange),
        stocks: devnet.stocks,
        relayerKey: Redacted.make(DEVNET_RELAYER_KEY),
        local: true
      } satisfies Deployment
    })
  )
}

export class ChainError extends Data.TaggedError("ChainError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

/** The call was refused before anything was broadcast (simulation reverted); `reason` is the revert text. */
export class CallReverted extends Data.TaggedError("CallReverted")<{ readonly reason: string }> {}

export interface SignedTransaction {
  readonly hash: Hash
  readonly raw: Hex
  readonly nonce: number
}

export interface ContractCall<TAbi extends Abi, Name extends ContractFunctionName<TAbi, "nonpayable" | "payable">> {
  readonly address: Address
  readonly abi: TAbi
  readonly functionName: Name
  readonly args: ContractFunctionArgs<TAbi, "nonpayable" | "payable", Name>
}

export const errorText = (cause: unknown): string => {
  if (cause !== null && typeof cause === "object") {
    const details = cause as { shortMessage?: unknown; details?: unknown; message?: unknown }
    const reason = /reverted with the following reason:\s*\n?(.+)/.exec(String(details.message ?? ""))
    if (reason?.[1] !== undefined) return reason[1].trim()
    if (typeof details.shortMessage === "string") {
      // The node's own words (e.g. "transaction already imported") are in `details`.
      return typeof details.details === "string" && details.details !== ""
        ? `${details.shortMessage} ${details.details}`
        : details.shortMessage
    }
  }
  return cause instanceof Error ? cause.message : String(cause)
}

const chainCall = <A>(what: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (cause) => new ChainError({ message: `${what}: ${errorText(cause)}`, cause }) })

export class ChainClient extends Effect.Service<ChainClient>()("app/ChainClient", {
  scoped: Effect.gen(function* () {
    const deployment = yield* ChainDeployment
    const chain: Chain = defineChain({
      id: deployment.chainId,
      name: deployment.local ? "Devnet" : `Chain ${deployment.chainId}`,
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: [deployment.rpcUrl] } }
    })
    const pollingInterval = deployment.local ? 20 : 1_000
    const publicClient = createPublicClient({ chain, transport: http(deployment.rpcUrl), pollingInterval })
    const relayer = privateKeyToAccount(Redacted.value(deployment.relayerKey))
    // A retried send is never idempotent: writes go out exactly once per call.
    const wallet = createWalletClient({
      chain,
      account: relayer,
      transport: http(deployment.rpcUrl, { retryCount: 0 }),
      pollingInterval
    })
    const sendQueue = yield* Effect.makeSemaphore(1)

    const balanceOf = (token: Address, owner: Address) =>
      chainCall("balanceOf", () =>
        publicClient.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
      )

    /**
     * Simulates the call as the relayer (a revert fails with `CallReverted`, nothing sent), signs it
     * with the next nonce, lets `record` persist the signed transaction, then broadcasts it. The
     * whole sequence holds the relayer's send queue, so nonces go out in order.
     */
    const relay = <
      const TAbi extends Abi,
      Name extends ContractFunctionName<TAbi, "nonpayable" | "payable">,
      E = never,
      R = never
    >(
      call: ContractCall<TAbi, Name>,
      record: (signed: SignedTransaction) => Effect.Effect<void, E, R> = () => Effect.void
    ) =>
      sendQueue
        .withPermits(1)(
          Effect.gen(function* () {
            const request = { account: relayer, ...call } as Parameters<typeof publicClient.estimateContractGas>[0]
            const gas = yield* Effect.tryPromise({
              try: () => publicClient.estimateContractGas(request),
              catch: (cause) => new CallReverted({ reason: errorText(cause) })
            })
            const nonce = yield* chainCall("nonce", () =>
              publicClient.getTransactionCount({ address: relayer.address, blockTag: "pending" })
            )
            const prepared = yield* chainCall("prepare", () =>
              wallet.prepareTransactionRequest({
                to: call.address,
                data: encodeFunctionData(call as Parameters<typeof encodeFunctionData>[0]),
                gas: (gas * 12n) / 10n,
                nonce,
                chain
              })
            )
            const raw = yield* chainCall("sign", () => wallet.signTransaction(prepared as never))
            const signed: SignedTransaction = { hash: keccak256(raw), raw, nonce }
            yield* record(signed)
            yield* chainCall("broadcast", () => wallet.sendRawTransaction({ serializedTransaction: raw }))
            return signed
          })
        )
        .pipe(Effect.withSpan("ChainClient.relay", { attributes: { "chain.function": call.functionName } }))

    /** Sends an already signed transaction again (crash recovery); "already known" is success. */
    const rebroadcast = (raw: Hex) =>
      chainCall("rebroadcast", () => wallet.sendRawTransaction({ serializedTransaction: raw })).pipe(
        Effect.asVoid,
        Effect.catchIf(
          (error) => /already known|already imported|nonce too low/i.test(error.message),
          () => Effect.void
        )
      )

    /** The receipt, waiting up to `timeoutMs`; none when the transaction is not mined by then. */
    const receipt = (hash: Hash, timeoutMs: number): Effect.Effect<Option.Option<TransactionReceipt>, ChainError> =>
      Effect.tryPromise({
        try: () => publicClient.waitForTransactionReceipt({ hash, timeout: timeoutMs, pollingInterval }),
        catch: (cause) => cause
      }).pipe(
        Effect.map(Option.some),
        Effect.catchAll((cause) =>
          cause instanceof Error && /Timed out|could not be found/i.test(cause.name + cause.message)
            ? Effect.succeed(Option.none<TransactionReceipt>())
            : Effect.fail(new ChainError({ message: `receipt: ${errorText(cause)}`, cause }))
        ),
        Effect.withSpan("ChainClient.receipt", { attributes: { "chain.tx": hash } })
      )

    return {
      deployment,
      chain,
      network: `eip155:${deployment.chainId}` as const,
      publicClient,
      relayerAddress: relayer.address,
      balanceOf,
      relay,
      rebroadcast,
      receipt
    }
  })
}) {}
