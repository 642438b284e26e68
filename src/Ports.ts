/**
 * The composition root of the ports: every external system this service talks to is chosen here,
 * from configuration, and nowhere else. Domain services only name the port Tags they use; the
 * HTTP app (`httpLive`) requires the ports and `main.ts` provides `PortsLive`.
 *
 * | Port               | Default (chosen from configuration)                                   |
 * |--------------------|-----------------------------------------------------------------------|
 * | `ChainClient`, `TokenRegistry` | `CHAIN_RPC_URL` and the addresses, else an embedded devnet |
 * | `PriceFeed`        | the registry tokens' on-chain feeds and pause flags                   |
 * | `PaymentProcessor` | `FACILITATOR_URL`'s facilitator, else our relayer                      |
 * | `KycProvider`      | `KYC_PROVIDER`: the built-in sandbox, or Didit                         |
 * | `CardNetwork`      | `CARD_NETWORK`: the built-in sandbox network, or Lithic                 |
 * | `CardIssuer`       | the card network's issuer: the local one with the sandbox, Lithic's API |
 * | `Secrets`          | `CARD_DATA_KEY` and named secrets, else development files in DATA_DIR |
 * | `AgentWallet`      | one wallet per card on the chain, keys derived from `AGENT_WALLET_SEED` |
 * | `CardProgram`      | the settlement account on the chain, its key `CARD_PROGRAM_KEY`        |
 *
 * A developer or a test replaces any of them with one Layer; the default of a replaced port is not
 * even built (no devnet starts when the chain is replaced):
 *
 *     httpLive(server).pipe(Layer.provide(portsLayer({ kycProvider: ScriptedKycProvider.layer() })), ...)
 */
import { FetchHttpClient } from "@effect/platform"
import type { SqlClient } from "@effect/sql"
import { Config, Effect, Layer, Option } from "effect"
import type { AgentWallet } from "./agent/AgentWallet.js"
import { ChainAgentWallet } from "./agent/ChainAgentWallet.js"
import { networkName } from "./authorizations/AuthorizationSettings.js"
import type { CardNetwork } from "./authorizations/CardNetwork.js"
import { LithicIssuer } from "./authorizations/LithicIssuer.js"
import { ConfiguredCardNetwork } from "./authorizations/Networks.js"
import type { SandboxNetworkKey } from "./authorizations/SandboxNetwork.js"
import { type CardIssuer, LocalCardIssuer } from "./cards/CardIssuer.js"
import type { CardProgram } from "./cards/CardProgram.js"
import { ChainCardProgram } from "./cards/ChainCardProgram.js"
import type { ChainClient } from "./chain/ChainClient.js"
import { ChainDeployment, DeployedTokens } from "./chain/Deployment.js"
import { EvmChain } from "./chain/EvmChain.js"
import type { TokenRegistry } from "./chain/Tokens.js"
import { DiditProviderLive } from "./kyc/DiditProvider.js"
import { KycConfig } from "./kyc/KycConfig.js"
import type { KycProvider } from "./kyc/KycProvider.js"
import { SandboxProviderLive } from "./kyc/SandboxProvider.js"
import { PriceFeed } from "./market/PriceFeed.js"
import { FacilitatorProcessor, type PaymentProcessor, RelayerProcessor } from "./merchant/PaymentProcessor.js"
import type { AppConfig } from "./runtime/Config.js"
import { Secrets } from "./runtime/Secrets.js"

/** Every port, as the HTTP app requires them. */
export type Ports =
  | ChainClient
  | TokenRegistry
  | PriceFeed
  | PaymentProcessor
  | KycProvider
  | CardNetwork
  | CardIssuer
  | Secrets
  | AgentWallet
  | CardProgram

/** A replacement for each port, with what it may itself require. */
export interface PortLayers {
  readonly chain: Layer.Layer<ChainClient | TokenRegistry, unknown, AppConfig>
  readonly priceFeed: Layer.Layer<PriceFeed, unknown, ChainClient | TokenRegistry>
  readonly paymentProcessor: Layer.Layer<PaymentProcessor, unknown, ChainClient>
  readonly kycProvider: Layer.Layer<KycProvider, unknown, AppConfig | KycConfig | Secrets | SqlClient.SqlClient>
  /** The card network; the sandbox network also provides the key its terminal signs with. */
  readonly cardNetwork: Layer.Layer<CardNetwork | SandboxNetworkKey, unknown, AppConfig | Secrets>
  readonly cardIssuer: Layer.Layer<CardIssuer, unknown>
  readonly secrets: Layer.Layer<Secrets, unknown, AppConfig>
  readonly agentWallet: Layer.Layer<AgentWallet, unknown, ChainClient | TokenRegistry | Secrets>
  readonly cardProgram: Layer.Layer<CardProgram, unknown, ChainClient | Secrets>
}

/** `CHAIN_RPC_URL` and the contract addresses, or the embedded devnet (also `npm run cards:reconcile`'s). */
export const ConfiguredChain = Layer.merge(EvmChain, DeployedTokens).pipe(Layer.provide(ChainDeployment.layer))

/** `FACILITATOR_URL` selects a facilitator; otherwise our relayer settles. */
const ConfiguredPaymentProcessor = Layer.unwrapEffect(
  Effect.map(Config.option(Config.string("FACILITATOR_URL")), (url) =>
    Option.isSome(url) ? FacilitatorProcessor(url.value).pipe(Layer.provide(FetchHttpClient.layer)) : RelayerProcessor
  )
)

/** `KYC_PROVIDER`: the built-in sandbox (default) or Didit. */
const ConfiguredKycProvider = Layer.unwrapEffect(
  Effect.map(KycConfig, (config) => (config.provider === "didit" ? DiditProviderLive : SandboxProviderLive))
)

/** The card network's issuer: Lithic's API with `CARD_NETWORK=lithic`, the local one with the sandbox. */
const ConfiguredCardIssuer = Layer.unwrapEffect(
  Effect.map(networkName, (network) => (network === "lithic" ? LithicIssuer : LocalCardIssuer))
)

const defaults: PortLayers = {
  chain: ConfiguredChain,
  priceFeed: PriceFeed.onchain,
  paymentProcessor: ConfiguredPaymentProcessor,
  kycProvider: ConfiguredKycProvider,
  cardNetwork: ConfiguredCardNetwork,
  cardIssuer: ConfiguredCardIssuer,
  secrets: Secrets.layer,
  agentWallet: ChainAgentWallet,
  cardProgram: ChainCardProgram
}

/** Every port: the given replacements, and the configured default for the others. */
export const portsLayer = (overrides: Partial<PortLayers> = {}) => {
  const ports = { ...defaults, ...overrides }
  return Layer.mergeAll(
    ports.priceFeed,
    ports.paymentProcessor,
    ports.kycProvider,
    ports.cardNetwork,
    ports.cardIssuer,
    ports.agentWallet,
    ports.cardProgram
  ).pipe(Layer.provideMerge(ports.chain), Layer.provideMerge(ports.secrets), Layer.provide(KycConfig.layer))
}

export const PortsLive = portsLayer()
