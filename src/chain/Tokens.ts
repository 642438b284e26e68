/**
 * The token registry port: the stock tokens this service knows on its chain. The deployment's
 * list by default (`DeployedTokens` in Deployment.ts: the devnet's fixtures, or `STOCK_TOKENS`); a
 * platform's own list is another Layer of this Tag.
 */
import { Context } from "effect"
import type { Address } from "./Address.js"

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

export class TokenRegistry extends Context.Tag("app/TokenRegistry")<TokenRegistry, TokenRegistryShape>() {}
