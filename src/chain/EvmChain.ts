/**
 * `ChainClient` over JSON-RPC with viem, for the deployment in `ChainDeployment` (the embedded
 * devnet or a configured chain). Writes go out from one relayer account through one ordered send
 * queue; a send is never retried by the transport (it is not idempotent).
 */
import { Effect, Layer, Option, Redacted } from "effect"
import {
  BaseError,
  type Chain,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  createPublicClient,
  createWalletClient,
  defineChain,
  encodeFunctionData,
  erc20Abi,
  getAddress,
  type Hash,
  type Hex,
  http,
  isAddressEqual,
  keccak256,
  parseAbiItem,
  parseEventLogs,
  parseSignature,
  recoverMessageAddress,
  recoverTypedDataAddress
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { verifyTypedData } from "viem/actions"
import {
  CallReverted,
  ChainClient,
  ChainError,
  type Receipt,
  type SignedTransaction,
  type TransferAuthorization
} from "./ChainClient.js"
import { PriceFeedArtifact, StockTokenArtifact, Usd1Artifact } from "./contracts/artifacts.js"
import { ChainDeployment } from "./Deployment.js"
import { transferWithAuthorizationTypedData } from "./Eip3009.js"

/** viem's error text, with the node's own words and a revert reason when there is one. */
export const errorText = (cause: unknown): string => {
  if (cause !== null && typeof cause === "object") {
    const details = cause as { shortMessage?: unknown; details?: unknown; message?: unknown }
    const reason = /reverted with the following reason:\s*\n?(.+)/.exec(String(details.message ?? ""))
    if (reason?.[1] !== undefined) return reason[1].trim()
    if (typeof details.shortMessage === "string") {
      return typeof details.details === "string" && details.details !== ""
        ? `${details.shortMessage} ${details.details}`
        : details.shortMessage
    }
  }
  return cause instanceof Error ? cause.message : String(cause)
}

const chainCall = <A>(what: string, f: () => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (cause) => new ChainError({ message: `${what}: ${errorText(cause)}`, cause }) })

/**
 * A call to a function the contract does not have reverts without any data (or, on an account
 * without code, returns nothing). For `paused()` that means "no pause flag", not a failed read.
 */
const isMissingFunction = (cause: unknown) =>
  cause instanceof BaseError &&
  cause.walk(
    (e) =>
      e instanceof ContractFunctionZeroDataError ||
      (e instanceof ContractFunctionRevertedError &&
        e.data === undefined &&
        e.signature === undefined &&
        (e.reason === undefined || e.reason === "execution reverted"))
  ) !== null

const authorizationUsedEvent = parseAbiItem(
  "event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)"
)

export const EvmChain = Layer.scoped(
  ChainClient,
  Effect.gen(function* () {
    const deployment = yield* ChainDeployment
    const { usd1 } = deployment
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

    const verifyMessage = (address: `0x${string}`, message: string, signature: Hex) =>
      Effect.promise(async () => {
        // An EOA signature recovers locally; otherwise the chain is asked (ERC-1271 contract
        // wallets, ERC-6492 for wallets not deployed yet). A malformed signature is "not signed".
        const recovered = await recoverMessageAddress({ message, signature }).catch(() => undefined)
        if (recovered !== undefined && isAddressEqual(recovered, address)) return true
        return publicClient.verifyMessage({ address, message, signature }).catch(() => false)
      })

    const verifyAuthorization = (authorization: TransferAuthorization, signature: Hex) =>
      Effect.promise(async () => {
        const typed = { signature, ...transferWithAuthorizationTypedData(authorization, deployment) }
        const recovered = await recoverTypedDataAddress(typed).catch(() => undefined)
        if (recovered !== undefined && isAddressEqual(recovered, authorization.from)) return true
        return verifyTypedData(publicClient, { address: authorization.from, ...typed }).catch(() => false)
      })

    const balanceOf = (token: `0x${string}`, owner: `0x${string}`) =>
      chainCall("balanceOf", () =>
        publicClient.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
      )

    const authorizationState = (authorizer: `0x${string}`, nonce: Hex) =>
      chainCall("authorizationState", () =>
        publicClient.readContract({
          address: usd1.address,
          abi: Usd1Artifact.abi,
          functionName: "authorizationState",
          args: [authorizer, nonce]
        })
      )

    const authorizationUsedIn = (authorizer: `0x${string}`, nonce: Hex) =>
      chainCall("AuthorizationUsed logs", () =>
        publicClient.getLogs({
          address: usd1.address,
          event: authorizationUsedEvent,
          args: { authorizer, nonce },
          fromBlock: 0n
        })
      ).pipe(Effect.map((logs) => Option.fromNullable(logs[0]?.transactionHash ?? undefined)))

    const usd1DomainSeparator = Effect.tryPromise(() =>
      publicClient.readContract({ address: usd1.address, abi: Usd1Artifact.abi, functionName: "DOMAIN_SEPARATOR" })
    ).pipe(Effect.option)

    const transferWithAuthorization = <E, R>(
      authorization: TransferAuthorization,
      signature: Hex,
      record: (signed: SignedTransaction) => Effect.Effect<void, E, R>
    ) => {
      const a = authorization
      const common = [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce] as const
      // A 65-byte signature goes through the (v, r, s) overload; anything else (a contract
      // wallet's signature) through the bytes overload, which asks ERC-1271.
      const data =
        signature.length === 132
          ? (() => {
              const { v, r, s, yParity } = parseSignature(signature)
              return encodeFunctionData({
                abi: Usd1Artifact.abi,
                functionName: "transferWithAuthorization",
                args: [...common, Number(v ?? 27n + BigInt(yParity)), r, s]
              })
            })()
          : encodeFunctionData({
              abi: Usd1Artifact.abi,
              functionName: "transferWithAuthorization",
              args: [...common, signature]
            })
      return sendQueue
        .withPermits(1)(
          Effect.gen(function* () {
            const gas = yield* Effect.tryPromise({
              try: () => publicClient.estimateGas({ account: relayer, to: usd1.address, data }),
              catch: (cause) => new CallReverted({ reason: errorText(cause) })
            })
            const nonce = yield* chainCall("nonce", () =>
              publicClient.getTransactionCount({ address: relayer.address, blockTag: "pending" })
            )
            const prepared = yield* chainCall("prepare", () =>
              wallet.prepareTransactionRequest({ to: usd1.address, data, gas: (gas * 12n) / 10n, nonce, chain })
            )
            const raw = yield* chainCall("sign", () => wallet.signTransaction(prepared as never))
            const signed: SignedTransaction = { hash: keccak256(raw), raw, nonce }
            yield* record(signed)
            yield* chainCall("broadcast", () => wallet.sendRawTransaction({ serializedTransaction: raw }))
            return signed
          })
        )
        .pipe(Effect.withSpan("ChainClient.transferWithAuthorization"))
    }

    const rebroadcast = (raw: Hex) =>
      chainCall("rebroadcast", () => wallet.sendRawTransaction({ serializedTransaction: raw })).pipe(
        Effect.asVoid,
        Effect.catchIf(
          (error) => /already known|already imported|nonce too low/i.test(error.message),
          () => Effect.void
        )
      )

    const receipt = (hash: Hash, timeoutMs: number) =>
      Effect.tryPromise({
        try: () => publicClient.waitForTransactionReceipt({ hash, timeout: timeoutMs, pollingInterval }),
        catch: (cause) => cause
      }).pipe(
        Effect.map((mined) =>
          Option.some<Receipt>({
            hash,
            status: mined.status,
            transfers: parseEventLogs({ abi: erc20Abi, eventName: "Transfer", logs: mined.logs }).map((log) => ({
              token: getAddress(log.address),
              from: getAddress(log.args.from),
              to: getAddress(log.args.to),
              value: log.args.value
            }))
          })
        ),
        Effect.catchAll((cause) =>
          cause instanceof Error && /Timed out|could not be found/i.test(cause.name + cause.message)
            ? Effect.succeed(Option.none<Receipt>())
            : Effect.fail(new ChainError({ message: `receipt: ${errorText(cause)}`, cause }))
        ),
        Effect.withSpan("ChainClient.receipt", { attributes: { "chain.tx": hash } })
      )

    /** Feed decimals never change; read once per feed. */
    const feedDecimals = new Map<string, number>()
    const decimalsOf = (feed: `0x${string}`) => {
      const known = feedDecimals.get(feed)
      if (known !== undefined) return Effect.succeed(known)
      return chainCall("decimals()", () =>
        publicClient.readContract({ address: feed, abi: PriceFeedArtifact.abi, functionName: "decimals" })
      ).pipe(Effect.tap((decimals) => Effect.sync(() => feedDecimals.set(feed, decimals))))
    }

    const feedRound = (feed: `0x${string}`) =>
      Effect.all(
        [
          chainCall("latestRoundData()", () =>
            publicClient.readContract({ address: feed, abi: PriceFeedArtifact.abi, functionName: "latestRoundData" })
          ),
          decimalsOf(feed)
        ],
        { concurrency: "unbounded" }
      ).pipe(Effect.map(([[, answer, , updatedAt], decimals]) => ({ answer, decimals, updatedAt })))

    const tokenPaused = (token: `0x${string}`) =>
      Effect.tryPromise({
        try: () => publicClient.readContract({ address: token, abi: StockTokenArtifact.abi, functionName: "paused" }),
        catch: (cause) => cause
      }).pipe(
        Effect.catchAll((cause) =>
          isMissingFunction(cause)
            ? Effect.succeed(false)
            : Effect.fail(new ChainError({ message: `paused(): ${errorText(cause)}`, cause }))
        )
      )

    const blockTime = chainCall("latest block", () => publicClient.getBlock()).pipe(
      Effect.map((block) => block.timestamp)
    )

    return ChainClient.of({
      chainId: deployment.chainId,
      network: `eip155:${deployment.chainId}`,
      usd1,
      relayer: relayer.address,
      verifyMessage,
      verifyAuthorization,
      balanceOf,
      authorizationState,
      authorizationUsedIn,
      usd1DomainSeparator,
      transferWithAuthorization,
      rebroadcast,
      receipt,
      feedRound,
      tokenPaused,
      blockTime
    })
  })
)
