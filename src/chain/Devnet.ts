/**
 * Embedded devnet: an anvil node (Anvil.ts) with USD1, the stock tokens, their price feeds and the
 * demo exchange deployed (a minter of every stock: a buy mints what it pays out), our Multicall's
 * code at the canonical Multicall3 address, and the ten standard dev accounts funded. Operator
 * helpers that change its state (prices, pauses, mints) are in DevnetOperator.ts.
 *
 * Without `stateDir` every start is a fresh, ephemeral chain (tests). With `stateDir` the chain state
 * is kept in `<stateDir>/anvil-state.json` and the addresses in `<stateDir>/devnet.json`, and a
 * restart reuses both, bringing a state of an older layout up to date (see `upgrade`).
 *
 * One unit because a fresh deployment, an upgrade and a restore are one sequence of setup steps
 * over one manifest: apart, each would have to know the others' layout. The clients and helpers
 * at the top are what operators and tests use on a devnet this file started.
 */
import { readFile, rename, writeFile } from "node:fs/promises"
import * as path from "node:path"
import { Data, Effect, Option, Schema, type Scope } from "effect"
import {
  type Address,
  type Chain,
  createPublicClient,
  createTestClient,
  createWalletClient,
  defineChain,
  encodeDeployData,
  encodeFunctionData,
  getContractAddress,
  type Hash,
  type Hex,
  http,
  type PublicClient,
  parseUnits,
  TransactionReceiptNotFoundError,
  type Transport
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { EmbeddedServerError } from "../embedded/EmbeddedServer.js"
import { Address as AddressSchema } from "./Address.js"
import { startAnvil } from "./Anvil.js"
import {
  DemoExchangeArtifact,
  MulticallArtifact,
  PriceFeedArtifact,
  SmartAccountFactoryArtifact,
  StockTokenArtifact,
  Usd1Artifact
} from "./contracts/artifacts.js"
import { MULTICALL3_ADDRESS } from "./Multicall.js"
import { wallClockPause } from "./WallClock.js"

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
  /** A `SmartAccountFactory`: counterfactual ERC-4337 smart accounts (ERC-1271, ERC-6492) for tests and demos. */
  readonly accountFactory: Address
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

/** anvil account 0: deploys and owns every devnet contract, and mints. */
export const DEVNET_DEPLOYER_KEY: Hex = ANVIL_ACCOUNT_KEYS[0]!

/** USD1 minted to each of the ten dev accounts on a fresh devnet (18 decimals). */
export const DEVNET_ACCOUNT_USD1 = parseUnits("10000", 18)
/** USD1 liquidity minted to the demo exchange on a fresh devnet (18 decimals). */
export const DEVNET_EXCHANGE_USD1 = parseUnits("10000000", 18)

/** On reuse, a feed older than this is re-posted at its current answer (the exchange refuses prices > 1 day old). */
const FEED_REFRESH_AGE_SECONDS = 12n * 3600n
/** Gas limit for the fixed-shape setup calls (mint, setFeed, setMinter), which cost 50-75k. */
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

/** How long an operator's or the setup's transaction may take to be mined on the devnet. */
const RECEIPT_LIMIT_MS = 30_000
/**
 * How long a transaction may wait on an automining devnet before a block is mined for it: anvil's
 * automine can leave a ready transaction in its pool when several arrive at once (foundry-rs/foundry
 * issue 10122), and nothing else would ever mine it.
 */
const AUTOMINE_NUDGE_MS = 2_000

/**
 * The receipt of a transaction sent to the devnet, read until it exists. Polled directly rather
 * than through viem's block watcher, which looks only when the block number changes: anvil mines
 * after it answers the send, so a first look can miss the receipt and, on an otherwise idle devnet,
 * no later block would come to look again. A transaction still waiting after AUTOMINE_NUDGE_MS on a
 * devnet that automines gets a block mined for it. Past the limit it says whether the node knows
 * the transaction at all (a dropped one never will be mined).
 */
export const awaitReceipt = (devnet: Pick<Devnet, "rpcUrl" | "chainId">, hash: Hash, what: string) =>
  Effect.gen(function* () {
    const client = publicClientFor(devnet)
    const deadline = Date.now() + RECEIPT_LIMIT_MS
    let nudgeAt = Date.now() + AUTOMINE_NUDGE_MS
    while (true) {
      const receipt = yield* attempt(`${what}: reading its receipt`, () =>
        client.getTransactionReceipt({ hash }).catch((cause) => {
          if (cause instanceof TransactionReceiptNotFoundError) return undefined
          throw cause
        })
      )
      if (receipt !== undefined) return receipt
      if (Date.now() >= nudgeAt) {
        nudgeAt = Date.now() + AUTOMINE_NUDGE_MS
        yield* attempt(`${what}: mining a block for it`, async () => {
          const anvil = createTestClient({ mode: "anvil", chain: devnetChain(devnet), transport: http(devnet.rpcUrl) })
          if (await anvil.getAutomine()) await anvil.mine({ blocks: 1 })
        })
      }
      if (Date.now() >= deadline) {
        const known = yield* attempt(`${what}: looking it up`, () =>
          client.getTransaction({ hash }).then(
            () => true,
            () => false
          )
        )
        return yield* new DevnetError({
          message: `${what}: ${hash} not mined within ${RECEIPT_LIMIT_MS / 1000} s (${known ? "still pending" : "unknown to the node: dropped"})`
        })
      }
      yield* wallClockPause(POLLING_INTERVAL_MS)
    }
  })

/** Sends one transaction signed by the deployer key and waits for its successful receipt. */
export const sendAsDeployer = (
  devnet: Devnet,
  what: string,
  send: (wallet: DeployerWallet) => Promise<Hash>
): Effect.Effect<Hash, DevnetError> =>
  Effect.gen(function* () {
    const wallet = walletClientFor(devnet, devnet.deployerKey)
    const hash = yield* attempt(`${what} failed`, () => send(wallet))
    const receipt = yield* awaitReceipt(devnet, hash, what)
    if (receipt.status !== "success") return yield* new DevnetError({ message: `${what}: transaction reverted` })
    return hash
  })

// ---------------------------------------------------------------------------------------------------
// Manifest

/**
 * 1: the first layout, whose exchange could only sell. 2: the exchange also buys (it mints the stock
 * tokens). 3: a smart-account factory. On start a version-1 state gets a new exchange, an older one
 * than 3 the factory; everything else is kept.
 */
const MANIFEST_VERSION = 3

const Manifest = Schema.Struct({
  version: Schema.Literal(1, 2, MANIFEST_VERSION),
  chainId: Schema.Number,
  usd1: AddressSchema,
  exchange: AddressSchema,
  /** Absent before version 3. */
  accountFactory: Schema.optional(AddressSchema),
  stocks: Schema.Array(Schema.Struct({ symbol: Schema.String, address: AddressSchema, feed: AddressSchema }))
})
type Manifest = typeof Manifest.Type
/** A manifest of the current layout. */
type CurrentManifest = Manifest & { readonly accountFactory: Address }
const isCurrent = (manifest: Manifest): manifest is CurrentManifest =>
  manifest.version === MANIFEST_VERSION && manifest.accountFactory !== undefined

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

type Endpoint = Pick<Devnet, "rpcUrl" | "chainId">

/** One deployer transaction of a setup batch: a contract creation when `to` is absent. */
interface SetupStep {
  readonly what: string
  readonly to?: Address
  readonly data: Hex
}

const deployStep = (what: string, data: Hex): SetupStep => ({ what, data })

const callStep = (what: string, to: Address, data: Hex): SetupStep => ({ what, to, data })

/** The deployer's next nonce, pending transactions included. */
const deployerNonce = (devnet: Endpoint) =>
  attempt("cannot read the deployer nonce", () =>
    publicClientFor(devnet).getTransactionCount({
      address: privateKeyToAccount(DEVNET_DEPLOYER_KEY).address,
      blockTag: "pending"
    })
  )

/** Where the contract the deployer creates with `nonce` lands. */
const createdAt = (nonce: number): Address =>
  getContractAddress({ from: privateKeyToAccount(DEVNET_DEPLOYER_KEY).address, nonce: BigInt(nonce) })

/**
 * Sends the steps from the deployer with sequential nonces from `startNonce`, signed locally and sent
 * without waiting in between (anvil mines them in nonce order), then fails unless every one succeeded.
 */
const sendSetup = (devnet: Endpoint, startNonce: number, steps: ReadonlyArray<SetupStep>) =>
  Effect.gen(function* () {
    const client = publicClientFor(devnet)
    const sender = walletClientFor(devnet, DEVNET_DEPLOYER_KEY)
    const deployer = sender.account
    const [fees, gas] = yield* attempt("cannot estimate devnet setup gas and fees", () =>
      Promise.all([
        client.estimateFeesPerGas(),
        Promise.all(
          steps.map((step) =>
            step.to === undefined
              ? client.estimateGas({ account: deployer.address, data: step.data }).then((g) => (g * 12n) / 10n)
              : Promise.resolve(SETUP_CALL_GAS)
          )
        )
      ])
    )
    const hashes: Array<Hash> = []
    for (const [i, step] of steps.entries()) {
      const raw = yield* attempt(`devnet setup failed to sign (${step.what})`, () =>
        deployer.signTransaction({
          chainId: devnet.chainId,
          type: "eip1559",
          nonce: startNonce + i,
          gas: gas[i]!,
          maxFeePerGas: fees.maxFeePerGas,
          maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
          data: step.data,
          ...(step.to === undefined ? {} : { to: step.to })
        })
      )
      hashes.push(
        yield* attempt(`devnet setup failed to send (${step.what})`, () =>
          sender.sendRawTransaction({ serializedTransaction: raw })
        )
      )
    }
    if (hashes.length === 0) return
    // anvil mines in nonce order, so once the last receipt exists all of them do.
    yield* awaitReceipt(devnet, hashes[hashes.length - 1]!, "devnet setup")
    const receipts = yield* attempt("devnet setup: reading receipts", () =>
      Promise.all(hashes.map((hash) => client.getTransactionReceipt({ hash })))
    )
    const failed = receipts.flatMap((r, i) => (r.status === "success" ? [] : [steps[i]!.what]))
    if (failed.length > 0) {
      return yield* new DevnetError({ message: `devnet setup transactions reverted: ${failed.join(", ")}` })
    }
    yield* Effect.annotateCurrentSpan("transactions", hashes.length)
  })

const mintUsd1Step = (usd1: Address, to: Address, amount: bigint) =>
  callStep(
    `mint USD1 to ${to}`,
    usd1,
    encodeFunctionData({ abi: Usd1Artifact.abi, functionName: "mint", args: [to, amount] })
  )

/**
 * Deploys the exchange (the first step: sent with the nonce that puts it at `manifest.exchange`),
 * registers every stock's feed on it, makes it a minter of every stock and gives it USD1 liquidity.
 */
const exchangeSteps = (manifest: Pick<Manifest, "usd1" | "exchange" | "stocks">): ReadonlyArray<SetupStep> => [
  deployStep("deploy DemoExchange", encodeDeployData({ ...DemoExchangeArtifact, args: [manifest.usd1] })),
  ...manifest.stocks.flatMap((stock) => [
    callStep(
      `register ${stock.symbol}`,
      manifest.exchange,
      encodeFunctionData({ abi: DemoExchangeArtifact.abi, functionName: "setFeed", args: [stock.address, stock.feed] })
    ),
    // buys mint the stock token
    callStep(
      `make the exchange a ${stock.symbol} minter`,
      stock.address,
      encodeFunctionData({ abi: StockTokenArtifact.abi, functionName: "setMinter", args: [manifest.exchange, true] })
    )
  ]),
  mintUsd1Step(manifest.usd1, manifest.exchange, DEVNET_EXCHANGE_USD1)
]

const accountFactoryStep = deployStep("deploy SmartAccountFactory", encodeDeployData(SmartAccountFactoryArtifact))

const deploy = (devnet: Endpoint): Effect.Effect<CurrentManifest, DevnetError> =>
  Effect.gen(function* () {
    const startNonce = yield* deployerNonce(devnet)
    // Every transaction gets an explicit, sequential nonce, so the addresses are known up front.
    const stockCount = DEVNET_STOCK_FIXTURES.length
    const base = {
      usd1: createdAt(startNonce),
      exchange: createdAt(startNonce + 1 + 2 * stockCount),
      stocks: DEVNET_STOCK_FIXTURES.map((s, i) => ({
        symbol: s.ticker,
        address: createdAt(startNonce + 1 + i),
        feed: createdAt(startNonce + 1 + stockCount + i)
      }))
    }
    const steps: ReadonlyArray<SetupStep> = [
      deployStep("deploy USD1", encodeDeployData(Usd1Artifact)),
      ...DEVNET_STOCK_FIXTURES.map((s) =>
        deployStep(`deploy ${s.ticker}`, encodeDeployData({ ...StockTokenArtifact, args: [s.name, s.ticker] }))
      ),
      ...DEVNET_STOCK_FIXTURES.map((s) =>
        deployStep(
          `deploy ${s.ticker} feed`,
          encodeDeployData({ ...PriceFeedArtifact, args: [`${s.ticker} / USD`, toFeedAnswer(s.initialPrice)] })
        )
      ),
      ...exchangeSteps(base),
      ...ANVIL_ACCOUNT_KEYS.map((key) =>
        mintUsd1Step(base.usd1, privateKeyToAccount(key).address, DEVNET_ACCOUNT_USD1)
      ),
      // last, so that the contracts above stay where they were before the factory existed
      accountFactoryStep
    ]
    yield* sendSetup(devnet, startNonce, steps)
    const manifest: CurrentManifest = {
      version: MANIFEST_VERSION,
      chainId: devnet.chainId,
      ...base,
      accountFactory: createdAt(startNonce + steps.length - 1)
    }
    return manifest
  }).pipe(Effect.withSpan("Devnet.deploy"))

/**
 * Brings a manifest of an older layout up to date: a version-1 exchange cannot buy, so a new one
 * replaces it (registered, minter of every stock, with its own USD1 liquidity); a state older than
 * version 3 gets the smart-account factory. Tokens, feeds and balances stay.
 */
const upgrade = (devnet: Endpoint, manifest: Manifest): Effect.Effect<CurrentManifest, DevnetError> =>
  Effect.gen(function* () {
    if (isCurrent(manifest)) return manifest
    const startNonce = yield* deployerNonce(devnet)
    const exchange = manifest.version === 1 ? createdAt(startNonce) : manifest.exchange
    const newExchange = manifest.version === 1 ? exchangeSteps({ ...manifest, exchange }) : []
    yield* sendSetup(devnet, startNonce, [...newExchange, accountFactoryStep])
    const upgraded: CurrentManifest = {
      ...manifest,
      version: MANIFEST_VERSION,
      exchange,
      accountFactory: createdAt(startNonce + newExchange.length)
    }
    yield* Effect.logInfo(`devnet upgraded from layout ${manifest.version} to ${MANIFEST_VERSION}`).pipe(
      Effect.annotateLogs({ exchange, accountFactory: upgraded.accountFactory })
    )
    return upgraded
  }).pipe(Effect.withSpan("Devnet.upgrade"))

/** Places our Multicall's runtime code at the canonical Multicall3 address unless it is already there. */
const placeMulticall = (devnet: Endpoint) =>
  Effect.gen(function* () {
    const client = publicClientFor(devnet)
    const code = yield* attempt("cannot read the Multicall3 code", () =>
      client.getCode({ address: MULTICALL3_ADDRESS })
    )
    if (code === MulticallArtifact.deployedBytecode) return
    yield* attempt("cannot place the Multicall3 code", () =>
      createTestClient({ mode: "anvil", chain: devnetChain(devnet), transport: http(devnet.rpcUrl) }).setCode({
        address: MULTICALL3_ADDRESS,
        bytecode: MulticallArtifact.deployedBytecode
      })
    )
  })

/** True when the manifest matches this chain and fixture set and every contract has code. */
const manifestIsLive = (devnet: Endpoint, manifest: Manifest) =>
  Effect.gen(function* () {
    const sameStocks =
      manifest.chainId === devnet.chainId &&
      manifest.stocks.length === DEVNET_STOCK_FIXTURES.length &&
      DEVNET_STOCK_FIXTURES.every((f, i) => manifest.stocks[i]?.symbol === f.ticker)
    if (!sameStocks) return false
    const client = publicClientFor(devnet)
    const addresses = [
      manifest.usd1,
      manifest.exchange,
      ...(manifest.accountFactory === undefined ? [] : [manifest.accountFactory]),
      ...manifest.stocks.flatMap((s) => [s.address, s.feed])
    ]
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

/**
 * After anvil restarted (supervised, see Anvil.ts): its state file normally still holds every
 * contract. A state lost altogether (no dump yet, or a torn one moved aside) means a fresh chain,
 * where deploying again from the deployer's first nonce puts every contract back at the same
 * address (with the initial balances); otherwise the devnet cannot be what its users know.
 */
const restoreContracts = (devnet: Endpoint, expected: CurrentManifest) =>
  Effect.gen(function* () {
    if (yield* manifestIsLive(devnet, expected)) return yield* placeMulticall(devnet)
    const again = yield* deploy(devnet)
    yield* placeMulticall(devnet)
    const addresses = (m: CurrentManifest) => JSON.stringify([m.usd1, m.exchange, m.accountFactory, m.stocks])
    if (addresses(again) !== addresses(expected)) {
      return yield* new DevnetError({
        message: "its state was lost, and its contracts cannot be deployed at the same addresses again"
      })
    }
    yield* Effect.logWarning("the devnet lost its state: its contracts were deployed again; balances start afresh")
  }).pipe(Effect.withSpan("Devnet.restoreContracts"))

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
    // What a restarted anvil must hold again: known once the contracts are deployed (before that, a
    // lost anvil fails this start).
    let deployed: CurrentManifest | undefined
    const rpcUrl = yield* startAnvil({
      chainId: DEVNET_CHAIN_ID,
      ...(stateDir === undefined ? {} : { stateDir }),
      recover: (url) =>
        deployed === undefined
          ? Effect.void
          : restoreContracts({ rpcUrl: url, chainId: DEVNET_CHAIN_ID }, deployed).pipe(
              Effect.mapError(
                (error) =>
                  new EmbeddedServerError({ server: "devnet", path: stateDir ?? "(ephemeral)", reason: error.message })
              )
            )
    })
    const endpoint = { rpcUrl, chainId: DEVNET_CHAIN_ID }

    const manifestFile = stateDir === undefined ? undefined : path.join(stateDir, MANIFEST_FILE)
    const existing = manifestFile === undefined ? Option.none() : yield* readManifest(manifestFile)
    const reusable = Option.isSome(existing) && (yield* manifestIsLive(endpoint, existing.value))
    const [manifest] = yield* Effect.all(
      [reusable ? upgrade(endpoint, existing.value) : deploy(endpoint), placeMulticall(endpoint)],
      { concurrency: 2 }
    )
    deployed = manifest
    const outcome = !reusable ? "fresh" : manifest === Option.getOrUndefined(existing) ? "reused" : "upgraded"
    if (manifestFile !== undefined && outcome !== "reused") yield* writeManifest(manifestFile, manifest)

    const devnet: Devnet = {
      rpcUrl,
      chainId: DEVNET_CHAIN_ID,
      usd1: manifest.usd1,
      exchange: manifest.exchange,
      accountFactory: manifest.accountFactory,
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
      deployerKey: DEVNET_DEPLOYER_KEY,
      accountKeys: ANVIL_ACCOUNT_KEYS
    }
    if (reusable) yield* refreshStaleFeeds(devnet)

    yield* Effect.annotateCurrentSpan({ "devnet.rpc_url": rpcUrl, "devnet.reused": reusable })
    yield* Effect.logInfo(`devnet ready at ${rpcUrl}`).pipe(
      Effect.annotateLogs({
        rpcUrl,
        usd1: devnet.usd1,
        exchange: devnet.exchange,
        accountFactory: devnet.accountFactory,
        deployment: outcome,
        stateDir: stateDir ?? "(ephemeral)",
        ms: Date.now() - started
      })
    )
    return devnet
  }).pipe(Effect.withSpan("Devnet.start"))
