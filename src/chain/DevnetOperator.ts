/**
 * Operator helpers for a running devnet: feed prices, trading pauses, mints and smart accounts, each
 * signed by the deployer key (the owner of every devnet contract). Run them one at a time per devnet:
 * they take the deployer's next nonce.
 */
import { Effect, Option } from "effect"
import { type Address, encodeFunctionData, type Hash, type Hex, serializeErc6492Signature } from "viem"
import {
  PriceFeedArtifact,
  SmartAccountFactoryArtifact,
  StockTokenArtifact,
  Usd1Artifact
} from "./contracts/artifacts.js"
import {
  attempt,
  type Devnet,
  DevnetError,
  type DevnetStock,
  publicClientFor,
  sendAsDeployer,
  toFeedAnswer
} from "./Devnet.js"

const findStock = (devnet: Devnet, symbol: string): Effect.Effect<DevnetStock, DevnetError> => {
  const stock = devnet.stocks.find((s) => s.symbol === symbol.toUpperCase())
  return stock === undefined
    ? Effect.fail(new DevnetError({ message: `unknown devnet stock ${symbol}` }))
    : Effect.succeed(stock)
}

/** Starts a new feed round at `price` (USD, up to 8 decimals). Returns the transaction hash. */
export const setStockPrice = (devnet: Devnet, symbol: string, price: number): Effect.Effect<Hash, DevnetError> =>
  Effect.gen(function* () {
    if (!Number.isFinite(price)) return yield* new DevnetError({ message: `invalid price ${price}` })
    const stock = yield* findStock(devnet, symbol)
    return yield* sendAsDeployer(devnet, `setPrice ${stock.symbol}`, (wallet) =>
      wallet.writeContract({
        address: stock.feed,
        abi: PriceFeedArtifact.abi,
        functionName: "setPrice",
        args: [toFeedAnswer(price)]
      })
    )
  }).pipe(Effect.withSpan("Devnet.setStockPrice", { attributes: { symbol, price } }))

/** Pauses (trading halt) or unpauses a stock token; a no-op when it is already in that state. */
export const setStockPaused = (
  devnet: Devnet,
  symbol: string,
  paused: boolean
): Effect.Effect<Option.Option<Hash>, DevnetError> =>
  Effect.gen(function* () {
    const stock = yield* findStock(devnet, symbol)
    const current = yield* attempt(`cannot read paused() of ${stock.symbol}`, () =>
      publicClientFor(devnet).readContract({
        address: stock.address,
        abi: StockTokenArtifact.abi,
        functionName: "paused"
      })
    )
    if (current === paused) return Option.none()
    const hash = yield* sendAsDeployer(devnet, `${paused ? "pause" : "unpause"} ${stock.symbol}`, (wallet) =>
      wallet.writeContract({
        address: stock.address,
        abi: StockTokenArtifact.abi,
        functionName: paused ? "pause" : "unpause"
      })
    )
    return Option.some(hash)
  }).pipe(Effect.withSpan("Devnet.setStockPaused", { attributes: { symbol, paused } }))

/** Mints `amount` (18-decimal base units) of a stock token to `to`. Reverts while the token is paused. */
export const mintStock = (
  devnet: Devnet,
  symbol: string,
  to: Address,
  amount: bigint
): Effect.Effect<Hash, DevnetError> =>
  Effect.gen(function* () {
    const stock = yield* findStock(devnet, symbol)
    return yield* sendAsDeployer(devnet, `mint ${stock.symbol}`, (wallet) =>
      wallet.writeContract({
        address: stock.address,
        abi: StockTokenArtifact.abi,
        functionName: "mint",
        args: [to, amount]
      })
    )
  }).pipe(Effect.withSpan("Devnet.mintStock", { attributes: { symbol, to } }))

/** Mints `amount` (18-decimal base units) of USD1 to `to`. */
export const mintUsd1 = (devnet: Devnet, to: Address, amount: bigint): Effect.Effect<Hash, DevnetError> =>
  sendAsDeployer(devnet, "mint USD1", (wallet) =>
    wallet.writeContract({ address: devnet.usd1, abi: Usd1Artifact.abi, functionName: "mint", args: [to, amount] })
  ).pipe(Effect.withSpan("Devnet.mintUsd1", { attributes: { to } }))

/** An owner's smart account of the devnet's factory: deployed or not, its address is known. */
export interface SmartAccountRef {
  readonly owner: Address
  /** Tells one owner's accounts apart. */
  readonly salt: bigint
}

/** The address of the owner's smart account (`SmartAccountFactory.getAddress`), deployed or not. */
export const smartAccountAddress = (devnet: Devnet, account: SmartAccountRef): Effect.Effect<Address, DevnetError> =>
  attempt("cannot read the smart account address", () =>
    publicClientFor(devnet).readContract({
      address: devnet.accountFactory,
      abi: SmartAccountFactoryArtifact.abi,
      functionName: "getAddress",
      args: [account.owner, account.salt]
    })
  )

/**
 * The owner's signature as an ERC-6492 signature of its not-yet-deployed account: wrapped with the
 * factory call that deploys it, so that a verifier can deploy it in simulation.
 */
export const counterfactualSignature = (devnet: Devnet, account: SmartAccountRef, ownerSignature: Hex): Hex =>
  serializeErc6492Signature({
    address: devnet.accountFactory,
    data: encodeFunctionData({
      abi: SmartAccountFactoryArtifact.abi,
      functionName: "createAccount",
      args: [account.owner, account.salt]
    }),
    signature: ownerSignature
  })

/** Deploys the owner's smart account (idempotent) and answers its address. */
export const createSmartAccount = (devnet: Devnet, account: SmartAccountRef): Effect.Effect<Address, DevnetError> =>
  Effect.gen(function* () {
    yield* sendAsDeployer(devnet, "create a smart account", (wallet) =>
      wallet.writeContract({
        address: devnet.accountFactory,
        abi: SmartAccountFactoryArtifact.abi,
        functionName: "createAccount",
        args: [account.owner, account.salt]
      })
    )
    return yield* smartAccountAddress(devnet, account)
  }).pipe(Effect.withSpan("Devnet.createSmartAccount", { attributes: { owner: account.owner } }))
