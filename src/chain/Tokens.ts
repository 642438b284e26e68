/**
 * The token registry port: the stock tokens this service knows on its chain. The deployment's
 * list by default (the devnet's fixtures, or `STOCK_TOKENS`); a platform's own list is another
 * Layer of this Tag.
 */
import { Context, Effect, Layer } from "effect"
import type { Address } from "./Address.js"
import { ChainDeployment } from "./Deployment.js"

export interface StockToken {
  readonly symbol: string
  readonly ticker: string
  readonly name: string
  readonly address: Address
  /** Chainlink AggregatorV3-compatible feed, USD per whole token. */
  readonly feed: Address
  readonly decimals: number
  /** Where the token trades, as shown in market data ("onchain" unless configured; "devnet" on the devnet). */
  readonly platform: string
}

export interface TokenRegistryShape {
  /** The chain the addresses are on. */
  readonly chainId: number
  readonly tokens: ReadonlyArray<StockToken>
}

export class TokenRegistry extends Context.Tag("app/TokenRegistry")<TokenRegistry, TokenRegistryShape>() {
  static readonly fromDeployment = Layer.effect(
    TokenRegistry,
    Effect.map(ChainDeployment, (deployment) => ({ chainId: deployment.chainId, tokens: deployment.stocks }))
  )
}
