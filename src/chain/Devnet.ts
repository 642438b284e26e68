/**
 * Embedded devnet: an anvil node (Anvil.ts) with USD1, the stock tokens, their price feeds and the
 * demo exchange deployed and the ten standard dev accounts funded. Operator helpers that change its
 * state (prices, pauses, mints) are in DevnetOperator.ts.
 *
 * Without `stateDir` every start is a fresh, ephemeral chain (tests). With `stateDir` the chain state
 * is kept in `<stateDir>/anvil-state.json` and the addresses in `<stateDir>/devnet.json`, and a
 * restart reuses both.
 */
import { readFile, rename, writeFile } from "node:fs/promises"
import * as path from "node:path"
import { Data, Effect, Option, Schema, type Scope } from "effect"
import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  defineChain,
  encodeDeployData,
  getContractAddress,
  type Hash,
  type Hex,
  http,
  type PublicClient,
  parseUnits,
  type Transport
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import type { EmbeddedServerError } from "../EmbeddedServer.js"
import { Address as AddressSchema } from "./Address.js"
import { startAnvil } from "./Anvil.js"
import { DemoExchangeArtifact, PriceFeedArtifact, StockTokenArtifact, Usd1Artifact } from "./contracts/artifacts.js"

// ---------------------------------------------------------------------------------------------------
// Public types

export interface DevnetStock {
  readonly symbol: string
  readonly ticker: string
  readonly name: string
  readonly address: Address
  readonly feed: Address
  readonly decimals: 18
  readonly initialPrice: number
}

export interface Devnet {
  readonly rpcUrl: string
  /** 31337 */
  readonly chainId: number
  readonly usd1: Address
  readonly exchange: Address
  readonly stocks: ReadonlyArray<DevnetStock>
  /** anvil account 0: owner of all contracts and minter */
  readonly deployerKey: Hex
  /** the 10 standard anvil dev accounts ("test test ... junk" mnemonic), index 0 = deployer */
  readonly accountKeys: ReadonlyArray<Hex>
}

export class DevnetError extends Data.TaggedError("DevnetError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface StartDevnetOptions {
  /** Keep chain state and the deployment manifest here across restarts. Omit for an ephemeral chain. */
  readonly stateDir?: string
}

// ---------------------------------------------------------------------------------------------------
// Fixtures

export const DEVNET_CHAIN_ID = 31337

/**
 * Private keys of the ten accounts anvil derives from its default mnemonic
 * ("test test test test test test test test test test test junk"). Public test keys: never use them
 * anywhere real.
 */
export const ANVIL_ACCOUNT_KEYS: ReadonlyArray<Hex> = [
  "0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80",
  "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
  "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
  "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
  "0x47e179ec197488593b187f80a00eb0da91f1b9d0b13f8733639f19c30a34926a",
  "0x8b3a350cf5c34c9194ca85829a2df0ec3153be0318b5e2d3348e872092edffba",
  "0x92db14e403b83dfe3df233f83dfa3a0d7096f21ca9b0d6d6b8d88b2b4ec1564e",
  "0x4bbbf85ce3377467afe5d46f804f221813b2bb87f24d81f60f1fcdbf7cbf4356",
  "0xdbda1821b80551c9d65939329250298aa3472ba22feea921c0cf5d620ea67b97",
  "0x2a871d0798f97d79848a013d4936a73bf4cc922c825d33c1cf7073dff6d409c6"
]

/** The stocks deployed on a fresh devnet, with their initial USD prices. */
export const DEVNET_STOCK_FIXTURES: ReadonlyArray<{
  readonly ticker: string
  readonly name: string
  readonly initialPrice: number
}> = [
  { ticker: "NVDA", name: "NVIDIA", initialPrice: 181.0 },
  { ticker: "TSLA", name: "Tesla", initialPrice: 402.5 },
  { ticker: "AAPL", name: "Apple", initialPrice: 229.3 },
  { ticker: "MSFT", name: "Microsoft", initialPrice: 447.8 },
  { ticker: "SPY", name: "SPDR S&P 500 ETF", initialPrice: 665.4 }
]

/** USD1 minted to each of the ten dev accounts on a fresh devnet (18 decimals). */
export const DEVNET_ACCOUNT_USD1 = parseUnits("10000", 18)
/** USD1 liquidity minted to the demo exchange on a fresh devnet (18 decimals). */
export const DEVNET_EXCHANGE_USD1 = parseUnits("10000000", 18)

/** On reuse, a feed older than this is re-posted at its current answer (the exchange refuses prices > 1 day old). */
const FEED_REFRESH_AGE_SECONDS = 12n * 3600n
/** Gas limit for the fixed-shape setup calls (mint, setFeed), which cost 50-75k. */
const SETUP_CALL_GAS = 200_000n
const POLLING_INTERVAL_MS = 20
const MANIFEST_FILE = "devnet.json"

// ---------------------------------------------------------------------------------------------------
// Helpers

const errorText = (cause: unknown): string => {
  if (cause !== null && typeof cause === "object") {
    const short = (cause as { shortMessage?: unknown }).shortMessage
    if (typeof short === "string") return short
  }
  return cause instanceof Error ? cause.message : String(cause)
}

export const attempt = <A>(what: string, f: () => Promise<A>): Effect.Effect<A, DevnetError> =>
  Effect.tryPromise({ try: f, catch: (cause) => new DevnetError({ message: `${what}: ${errorText(cause)}`, cause }) })

/** viem chain definition for a running devnet. */
export const devnetChain = (devnet: Pick<Devnet, "rpcUrl" | "chainId">): Chain =>
  defineChain({
    id: devnet.chainId,
    name: "Devnet",
    nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    rpcUrls: { default: { http: [devnet.rpcUrl] } }
  })

export const publicClientFor = (devnet: Pick<Devnet, "rpcUrl" | "chainId">): PublicClient<Transport, Chain> =>
  createPublicClient({
    chain: devnetChain(devnet),
    transport: http(devnet.rpcUrl),
    pollingInterval: POLLING_INTERVAL_MS
  })

export const walletClientFor = (devnet: Pick<Devnet, "rpcUrl" | "chainId">, key: Hex) =>
  createWalletClient({
    account: privateKeyToAccount(key),
    chain: devnetChain(devnet),
    // a resent write is never idempotent
    transport: http(devnet.rpcUrl, { retryCount: 0 }),
    pollingInterval: POLLING_INTERVAL_MS
  })

/** A USD price as the feed's 8-decimal integer answer. */
export const toFeedAnswer = (price: number): bigint => parseUnits(price.toFixed(8), 8)

type DeployerWallet = ReturnType<typeof walletClientFor>

/** Sends one transaction signed by the deployer key and waits for its successful receipt. */
export const sendAsDeployer = (
  devnet: Devnet,
  what: string,
  send: (wallet: DeployerWallet) => Promise<Hash>
): Effect.Effect<Hash, DevnetError> =>
  Effect.gen(function* () {
    const wallet = walletClientFor(devnet, devnet.deployerKey)
    const hash = yield* attempt(`${what} failed`, () => send(wallet))
    const receipt = yield* attempt(`${what}: no receipt`, () =>
      publicClientFor(devnet).waitForTransactionReceipt({ hash, timeout: 30_000 })
    )
    if (receipt.status !== "success") return yield* new DevnetError({ message: `${what}: transaction reverted` })
    return hash
  })

// ---------------------------------------------------------------------------------------------------
// Manifest

const Manifest = Schema.Struct({
  version: Schema.Literal(1),
  chainId: Schema.Number,
  usd1: AddressSchema,
  exchange: AddressSchema,
  stocks: Schema.Array(Schema.Struct({ symbol: Schema.String, address: AddressSchema, feed: AddressSchema }))
})
type Manifest = typeof Manifest.Type

const ManifestJson = Schema.parseJson(Manifest, { space: 2 })

/** The manifest, or none when it is missing or unreadable (then the contracts are deployed afresh). */
const readManifest = (file: string): Effect.Effect<Option.Option<Manifest>> =>
  Effect.gen(function* () {
    const text = yield* Effect.promise(() => readFile(file, "utf8").catch(() => undefined))
    if (text === undefined) return Option.none()
    return yield* Schema.decode(ManifestJson)(text).pipe(
      Effect.tapError((error) => Effect.logWarning(`ignoring unreadable devnet manifest ${file}: ${error.message}`)),
      Effect.option
    )
  })

const writeManifest = (file: string, manifest: Manifest) =>
  Effect.gen(function* () {
    const text = yield* Schema.encode(ManifestJson)(manifest).pipe(
      Effect.mapError((cause) => new DevnetError({ message: "cannot encode devnet manifest", cause }))
    )
    const tmp = `${file}.${process.pid}.tmp`
    yield* attempt(`cannot write ${file}`, async () => {
      await writeFile(tmp, `${text}\n`)
      await rename(tmp, file)
    })
  })

// ---------------------------------------------------------------------------------------------------
// Deployment

const deploy = (devnet: Pick<Devnet, "rpcUrl" | "chainId">): Effect.Effect<Manifest, DevnetError> =>
  Effect.gen(function* () {
    const client = publicClientFor(devnet)
    const deployerKey = ANVIL_ACCOUNT_KEYS[0]!
    const wallet = walletClientFor(devnet, deployerKey)
    const deployer = wallet.account.address

    const [startNonce, fees] = yield* attempt("cannot read deployer nonce and fees", () =>
      Promise.all([client.getTransactionCount({ address: deployer, blockTag: "pending" }), client.estimateFeesPerGas()])
    )
    const addressAt = (nonce: number) => getContractAddress({ from: deployer, nonce: BigInt(nonce) })

    // Every transaction gets an explicit, sequential nonce, so the addresses are known up front and the
    // whole setup is sent without waiting; anvil mines it in nonce order.
    const n = {
      usd1: startNonce,
      stock: (i: number) => startNonce + 1 + i,
      feed: (i: number) => startNonce + 1 + DEVNET_STOCK_FIXTURES.length + i,
      exchange: startNonce + 1 + 2 * DEVNET_STOCK_FIXTURES.length
    }
    const manifest: Manifest = {
      version: 1,
      chainId: devnet.chainId,
      usd1: addressAt(n.usd1),
      exchange: addressAt(n.exchange),
      stocks: DEVNET_STOCK_FIXTURES.map((s, i) => ({
        symbol: s.ticker,
        address: addressAt(n.stock(i)),
        feed: addressAt(n.feed(i))
      }))
    }

    const estimateDeploy = (data: Hex) => client.estimateGas({ account: deployer, data })
    const deployGas = yield* attempt("cannot estimate deployment gas", () =>
      Promise.all([
        estimateDeploy(encodeDeployData(Usd1Artifact)),
        ...DEVNET_STOCK_FIXTURES.map((s) =>
          estimateDeploy(encodeDeployData({ ...StockTokenArtifact, args: [s.name, s.ticker] }))
        ),
        ...DEVNET_STOCK_FIXTURES.map((s) =>
          estimateDeploy(
            encodeDeployData({ ...PriceFeedArtifact, args: [`${s.ticker} / USD`, toFeedAnswer(s.initialPrice)] })
          )
        ),
        estimateDeploy(encodeDeployData({ ...DemoExchangeArtifact, args: [manifest.usd1] }))
      ]).then((gas) => gas.map((g) => (g * 12n) / 10n))
    )
    const gasAt = (i: number) => deployGas[i]!
    const common = { maxFeePerGas: fees.maxFeePerGas, maxPriorityFeePerGas: fees.maxPriorityFeePerGas }

    const sends: Array<{ readonly what: string; readonly send: () => Promise<Hash> }> = [
      {
        what: "deploy USD1",
        send: () => wallet.deployContract({ ...Usd1Artifact, ...common, nonce: n.usd1, gas: gasAt(0) })
      },
      ...DEVNET_STOCK_FIXTURES.map((s, i) => ({
        what: `deploy ${s.ticker}`,
        send: () =>
          wallet.deployContract({
            ...StockTokenArtifact,
            ...common,
            args: [s.name, s.ticker],
            nonce: n.stock(i),
            gas: gasAt(1 + i)
          })
      })),
      ...DEVNET_STOCK_FIXTURES.map((s, i) => ({
        what: `deploy ${s.ticker} feed`,
        send: () =>
          wallet.deployContract({
            ...PriceFeedArtifact,
            ...common,
            args: [`${s.ticker} / USD`, toFeedAnswer(s.initialPrice)],
            nonce: n.feed(i),
            gas: gasAt(1 + DEVNET_STOCK_FIXTURES.length + i)
          })
      })),
      {
        what: "deploy DemoExchange",
        send: () =>
          wallet.deployContract({
            ...DemoExchangeArtifact,
            ...common,
            args: [manifest.usd1],
            nonce: n.exchange,
            gas: gasAt(1 + 2 * DEVNET_STOCK_FIXTURES.length)
          })
      }
    ]
    let nonce = n.exchange + 1
    const call = (what: string, send: (nonce: number) => Promise<Hash>) => {
      const txNonce = nonce++
      sends.push({ what, send: () => send(txNonce) })
    }
    for (const stock of manifest.stocks) {
      call(`register ${stock.symbol}`, (txNonce) =>
        wallet.writeContract({
          address: manifest.exchange,
          abi: DemoExchangeArtifact.abi,
          functionName: "setFeed",
          args: [stock.address, stock.feed],
          ...common,
          nonce: txNonce,
          gas: SETUP_CALL_GAS
        })
      )
    }
    const mintUsd1To = (to: Address, amount: bigint) =>
      call(`mint USD1 to ${to}`, (txNonce) =>
        wallet.writeContract({
          address: manifest.usd1,
          abi: Usd1Artifact.abi,
          functionName: "mint",
          args: [to, amount],
          ...common,
          nonce: txNonce,
          gas: SETUP_CALL_GAS
        })
      )
    mintUsd1To(manifest.exchange, DEVNET_EXCHANGE_USD1)
    for (const key of ANVIL_ACCOUNT_KEYS) mintUsd1To(privateKeyToAccount(key).address, DEVNET_ACCOUNT_USD1)

    // Send in nonce order (each send is one eth_sendRawTransaction: nothing left for viem to fill in).
    const hashes: Array<Hash> = []
    for (const { what, send } of sends) {
      hashes.push(yield* attempt(`devnet setup failed to send (${what})`, send))
    }
    // anvil mines in nonce order, so once the last receipt exists all of them do.
    yield* attempt("devnet setup: waiting for the last receipt", () =>
      client.waitForTransactionReceipt({ hash: hashes[hashes.length - 1]!, timeout: 30_000 })
    )
    const receipts = yield* attempt("devnet setup: reading receipts", () =>
      Promise.all(hashes.map((hash) => client.getTransactionReceipt({ hash })))
    )
    const failed = receipts.flatMap((r, i) => (r.status === "success" ? [] : [sends[i]!.what]))
    if (failed.length > 0) {
      return yield* new DevnetError({ message: `devnet setup transactions reverted: ${failed.join(", ")}` })
    }
    yield* Effect.annotateCurrentSpan("transactions", hashes.length)
    return manifest
  }).pipe(Effect.withSpan("Devnet.deploy"))

/** True when the manifest matches this chain and fixture set and every contract has code. */
const manifestIsLive = (devnet: Pick<Devnet, "rpcUrl" | "chainId">, manifest: Manifest) =>
  Effect.gen(function* () {
    const sameStocks =
      manifest.chainId === devnet.chainId &&
      manifest.stocks.length === DEVNET_STOCK_FIXTURES.length &&
      DEVNET_STOCK_FIXTURES.every((f, i) => manifest.stocks[i]?.symbol === f.ticker)
    if (!sameStocks) return false
    const client = publicClientFor(devnet)
    const addresses = [manifest.usd1, manifest.exchange, ...manifest.stocks.flatMap((s) => [s.address, s.feed])]
    const codes = yield* attempt("cannot read contract code", () =>
      Promise.all(addresses.map((address) => client.getCode({ address })))
    )
    return codes.every((code) => code !== undefined && code !== "0x")
  })

/** Re-posts feeds whose last update is older than FEED_REFRESH_AGE_SECONDS, keeping their answer. */
const refreshStaleFeeds = (devnet: Devnet) =>
  Effect.gen(function* () {
    const client = publicClientFor(devnet)
    const [block, rounds] = yield* attempt("cannot read feeds", () =>
      Promise.all([
        client.getBlock(),
        Promise.all(
          devnet.stocks.map((s) =>
            client.readContract({ address: s.feed, abi: PriceFeedArtifact.abi, functionName: "latestRoundData" })
          )
        )
      ])
    )
    const stale = devnet.stocks.flatMap((stock, i) => {
      const round = rounds[i]!
      return block.timestamp - round[3] > FEED_REFRESH_AGE_SECONDS ? [{ stock, answer: round[1] }] : []
    })
    for (const { stock, answer } of stale) {
      yield* sendAsDeployer(devnet, `refresh ${stock.symbol} feed`, (wallet) =>
        wallet.writeContract({
          address: stock.feed,
          abi: PriceFeedArtifact.abi,
          functionName: "setPrice",
          args: [answer]
        })
      )
    }
    if (stale.length > 0) yield* Effect.logInfo(`refreshed ${stale.length} stale devnet price feed(s)`)
  })

// ---------------------------------------------------------------------------------------------------
// startDevnet

/**
 * Starts anvil on a free local port (stopped when the scope closes) and deploys, or with `stateDir`
 * reuses, the devnet contracts. A failure to start anvil is an `EmbeddedServerError`.
 */
export const startDevnet = (
  options?: StartDevnetOptions
): Effect.Effect<Devnet, DevnetError | EmbeddedServerError, Scope.Scope> =>
  Effect.gen(function* () {
    const started = Date.now()
    const stateDir = options?.stateDir === undefined ? undefined : path.resolve(options.stateDir)
    const rpcUrl = yield* startAnvil({
      chainId: DEVNET_CHAIN_ID,
      ...(stateDir === undefined ? {} : { stateDir })
    })
    const endpoint = { rpcUrl, chainId: DEVNET_CHAIN_ID }

    const manifestFile = stateDir === undefined ? undefined : path.join(stateDir, MANIFEST_FILE)
    const existing = manifestFile === undefined ? Option.none() : yield* readManifest(manifestFile)
    const reusable = Option.isSome(existing) && (yield* manifestIsLive(endpoint, existing.value))
    const manifest = reusable ? existing.value : yield* deploy(endpoint)
    if (!reusable && manifestFile !== undefined) yield* writeManifest(manifestFile, manifest)

    const devnet: Devnet = {
      rpcUrl,
      chainId: DEVNET_CHAIN_ID,
      usd1: manifest.usd1,
      exchange: manifest.exchange,
      stocks: DEVNET_STOCK_FIXTURES.map((fixture, i) => {
        const deployed = manifest.stocks[i]!
        return {
          symbol: fixture.ticker,
          ticker: fixture.ticker,
          name: fixture.name,
          address: deployed.address,
          feed: deployed.feed,
          decimals: 18,
          initialPrice: fixture.initialPrice
        }
      }),
      deployerKey: ANVIL_ACCOUNT_KEYS[0]!,
      accountKeys: ANVIL_ACCOUNT_KEYS
    }
    if (reusable) yield* refreshStaleFeeds(devnet)

    yield* Effect.annotateCurrentSpan({ "devnet.rpc_url": rpcUrl, "devnet.reused": reusable })
    yield* Effect.logInfo(`devnet ready at ${rpcUrl}`).pipe(
      Effect.annotateLogs({
        rpcUrl,
        usd1: devnet.usd1,
        exchange: devnet.exchange,
        deployment: reusable ? "reused" : "fresh",
        stateDir: stateDir ?? "(ephemeral)",
        ms: Date.now() - started
      })
    )
    return devnet
  }).pipe(Effect.withSpan("Devnet.start"))
