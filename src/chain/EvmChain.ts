/**
 * `ChainClient` over JSON-RPC with viem, for the deployment in `ChainDeployment` (the embedded
 * devnet or a configured chain). Every sending account (the relayer, each agent wallet, the devnet's
 * faucet) has one ordered send queue; a send is simulated first, signed locally, recorded by the
 * caller, then broadcast once: the transport never retries it (a send is not idempotent).
 */
import { Effect, Layer, Option, Redacted } from "effect"
import {
  type Abi,
  BaseError,
  type Chain,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  createPublicClient,
  createWalletClient,
  decodeErrorResult,
  defineChain,
  encodeFunctionData,
  erc20Abi,
  getAddress,
  type Hash,
  type Hex,
  http,
  isAddressEqual,
  keccak256,
  maxUint256,
  type PrivateKeyAccount,
  parseAbiItem,
  parseEther,
  parseEventLogs,
  parseSignature,
  recoverMessageAddress,
  recoverTypedDataAddress
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { verifyTypedData } from "viem/actions"
import type { Address } from "./Address.js"
import {
  CallReverted,
  type ChainAccount,
  ChainClient,
  ChainError,
  type Faucet,
  type Receipt,
  type RecordSigned,
  type SignedTransaction,
  type TransferAuthorization
} from "./ChainClient.js"
import { DemoExchangeArtifact, PriceFeedArtifact, StockTokenArtifact, Usd1Artifact } from "./contracts/artifacts.js"
import { ChainDeployment } from "./Deployment.js"
import { DEVNET_DEPLOYER_KEY } from "./Devnet.js"
import { transferWithAuthorizationTypedData } from "./Eip3009.js"
import { chunksOf, MULTICALL_CHUNK, MULTICALL3_ADDRESS, rowsOf } from "./Multicall.js"
import { sendQueues } from "./SendQueues.js"

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

/** Every custom error our contracts can revert with, to name them in a revert reason. */
const contractErrors: Abi = [...Usd1Artifact.abi, ...StockTokenArtifact.abi, ...DemoExchangeArtifact.abi].filter(
  (item) => item.type === "error"
)

/**
 * Why a simulated call reverted: the `require` message, or the custom error's name
 * (`ERC20InsufficientAllowance`); else viem's text.
 */
const revertReason = (cause: unknown): string => {
  if (cause instanceof BaseError) {
    const reverted = cause.walk((e) => e instanceof ContractFunctionRevertedError)
    if (reverted instanceof ContractFunctionRevertedError) {
      const named = reverted.reason ?? reverted.data?.errorName
      if (named !== undefined) return named
    }
    const withData = cause.walk((e) => /^0x[0-9a-fA-F]{8}/.test(String((e as { data?: unknown }).data)))
    const data = (withData as { data?: Hex } | null)?.data
    if (data !== undefined) {
      try {
        const decoded = decodeErrorResult({ abi: contractErrors, data })
        return decoded.errorName === "Error" ? String(decoded.args?.[0]) : decoded.errorName
      } catch {
        // not one of ours: viem's text below
      }
    }
  }
  return errorText(cause)
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

/** A transaction to send: where, what, and the ether it carries. */
interface Call {
  readonly to: Address
  readonly data: Hex
  readonly value?: bigint
}

/** Gas ether the devnet faucet gives with every grant. */
const FAUCET_GAS = parseEther("1")
/** How long a send waits for a receipt it needs before going on (an approval, the faucet's mints). */
const RECEIPT_TIMEOUT_MS = 30_000
/** Multicall chunks read at once. */
const BALANCE_READS_IN_FLIGHT = 4

const noRecord: RecordSigned<never, never> = () => Effect.void

/** `mint(to, amount)` of USD1 and of the stock tokens alike. */
const mintAbi = [parseAbiItem("function mint(address to, uint256 amount)")]

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
      transport: http(deployment.rpcUrl, { retryCount: 0 }),
      pollingInterval
    })

    const queueOf = sendQueues()

    /** The gas the call needs, sent by `from`; a refusal (a revert) is `CallReverted`, nothing sent. */
    const simulate = (from: Address, call: Call) =>
      Effect.tryPromise({
        try: () => publicClient.estimateGas({ account: from, ...call }),
        catch: (cause) => new CallReverted({ reason: revertReason(cause) })
      })

    /**
     * Signs the call with the signer's next nonce, lets `record` persist it, then broadcasts it once.
     * Runs inside the signer's queue, after the call was simulated (`gas`).
     */
    const signAndSend = <E, R>(signer: PrivateKeyAccount, call: Call, gas: bigint, record: RecordSigned<E, R>) =>
      Effect.gen(function* () {
        const nonce = yield* chainCall("nonce", () =>
          publicClient.getTransactionCount({ address: signer.address, blockTag: "pending" })
        )
        const prepared = yield* chainCall("prepare", () =>
          wallet.prepareTransactionRequest({ account: signer, chain, ...call, gas: (gas * 12n) / 10n, nonce })
        )
        const raw = yield* chainCall("sign", () => signer.signTransaction(prepared as never))
        const signed: SignedTransaction = { hash: keccak256(raw), raw, nonce }
        yield* record(signed)
        yield* chainCall("broadcast", () => wallet.sendRawTransaction({ serializedTransaction: raw }))
        return signed
      })

    /** Simulates, signs, records and broadcasts one call from the signer's queue. */
    const send = <E, R>(signer: PrivateKeyAccount, call: Call, record: RecordSigned<E, R>) =>
      queueOf(signer.address).withPermits(1)(
        Effect.flatMap(simulate(signer.address, call), (gas) => signAndSend(signer, call, gas, record))
      )

    const minedSuccessfully = (what: string, hash: Hash) =>
      chainCall(what, () => publicClient.waitForTransactionReceipt({ hash, timeout: RECEIPT_TIMEOUT_MS })).pipe(
        Effect.filterOrFail(
          (mined) => mined.status === "success",
          () => new ChainError({ message: `${what}: transaction ${hash} reverted` })
        )
      )

    const verifyMessage = (address: Address, message: string, signature: Hex) =>
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

    const balanceOf = (token: Address, owner: Address) =>
      chainCall("balanceOf", () =>
        publicClient.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
      )

    const balances = (owners: ReadonlyArray<Address>, tokens: ReadonlyArray<Address>) => {
      const reads = owners.flatMap((owner) =>
        tokens.map((token) => ({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [owner] }) as const)
      )
      return Effect.forEach(
        chunksOf(reads, MULTICALL_CHUNK),
        (chunk) =>
          chainCall("balances (multicall)", () =>
            publicClient.multicall({
              contracts: chunk,
              allowFailure: false,
              multicallAddress: MULTICALL3_ADDRESS,
              // the chunks are ours: no further split by calldata size
              batchSize: 0
            })
          ),
        { concurrency: BALANCE_READS_IN_FLIGHT }
      ).pipe(
        Effect.map((results) => rowsOf(results.flat(), owners.length, tokens.length)),
        Effect.withSpan("ChainClient.balances", { attributes: { owners: owners.length, tokens: tokens.length } })
      )
    }

    const authorizationState = (authorizer: Address, nonce: Hex) =>
      chainCall("authorizationState", () =>
        publicClient.readContract({
          address: usd1.address,
          abi: Usd1Artifact.abi,
          functionName: "authorizationState",
          args: [authorizer, nonce]
        })
      )

    const authorizationUsedIn = (authorizer: Address, nonce: Hex) =>
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
      record: RecordSigned<E, R>
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
      return send(relayer, { to: usd1.address, data }, record).pipe(
        Effect.withSpan("ChainClient.transferWithAuthorization")
      )
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
    const decimalsOf = (feed: Address) => {
      const known = feedDecimals.get(feed)
      if (known !== undefined) return Effect.succeed(known)
      return chainCall("decimals()", () =>
        publicClient.readContract({ address: feed, abi: PriceFeedArtifact.abi, functionName: "decimals" })
      ).pipe(Effect.tap((decimals) => Effect.sync(() => feedDecimals.set(feed, decimals))))
    }

    const feedRound = (feed: Address) =>
      Effect.all(
        [
          chainCall("latestRoundData()", () =>
            publicClient.readContract({ address: feed, abi: PriceFeedArtifact.abi, functionName: "latestRoundData" })
          ),
          decimalsOf(feed)
        ],
        { concurrency: "unbounded" }
      ).pipe(Effect.map(([[, answer, , updatedAt], decimals]) => ({ answer, decimals, updatedAt })))

    const tokenPaused = (token: Address) =>
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

    // -----------------------------------------------------------------------------------------------
    // The service's own accounts

    const exchangeAddress = Option.match(deployment.exchange, {
      onNone: () => Effect.fail(new ChainError({ message: "no exchange is configured (EXCHANGE_ADDRESS)" })),
      onSome: (exchange) => Effect.succeed(exchange)
    })

    /**
     * Simulates a call that makes the exchange pull `amount` of `spent` from the signer. When the
     * only obstacle is the exchange's allowance, approves it for good (max, waited for) and simulates
     * again; any other refusal sends nothing.
     */
    const simulateSpending = (signer: PrivateKeyAccount, call: Call, spent: Address, amount: bigint) =>
      simulate(signer.address, call).pipe(
        Effect.catchIf(
          (refused) => /allowance/i.test(refused.reason),
          (refused) =>
            Effect.gen(function* () {
              const exchange = call.to
              const allowance = yield* chainCall("allowance", () =>
                publicClient.readContract({
                  address: spent,
                  abi: erc20Abi,
                  functionName: "allowance",
                  args: [signer.address, exchange]
                })
              )
              if (allowance >= amount) return yield* refused
              const approve: Call = {
                to: spent,
                data: encodeFunctionData({ abi: erc20Abi, functionName: "approve", args: [exchange, maxUint256] })
              }
              const gas = yield* simulate(signer.address, approve)
              const approval = yield* signAndSend(signer, approve, gas, noRecord)
              yield* minedSuccessfully("approve the exchange", approval.hash)
              return yield* simulate(signer.address, call)
            })
        )
      )

    const trade = <E, R>(
      signer: PrivateKeyAccount,
      side: "sell" | "buy",
      token: Address,
      amountIn: bigint,
      minOut: bigint,
      record: RecordSigned<E, R>
    ) =>
      Effect.gen(function* () {
        const exchange = yield* exchangeAddress
        const call: Call = {
          to: exchange,
          data: encodeFunctionData({
            abi: DemoExchangeArtifact.abi,
            functionName: side,
            args: [token, amountIn, minOut, signer.address]
          })
        }
        const spent = side === "sell" ? token : usd1.address
        return yield* queueOf(signer.address).withPermits(1)(
          Effect.flatMap(simulateSpending(signer, call, spent, amountIn), (gas) =>
            signAndSend(signer, call, gas, record)
          )
        )
      }).pipe(Effect.withSpan(`ChainAccount.${side}`, { attributes: { "chain.token": token } }))

    const account = (key: Redacted.Redacted<Hex>): ChainAccount => {
      const signer = privateKeyToAccount(Redacted.value(key))
      return {
        address: signer.address,
        sell: (token, amount, minUsd1Out, record) => trade(signer, "sell", token, amount, minUsd1Out, record),
        buy: (token, usd1In, minTokensOut, record) => trade(signer, "buy", token, usd1In, minTokensOut, record),
        transferUsd1: (to, amount, record) =>
          send(
            signer,
            {
              to: usd1.address,
              data: encodeFunctionData({ abi: erc20Abi, functionName: "transfer", args: [to, amount] })
            },
            record
          ).pipe(Effect.withSpan("ChainAccount.transferUsd1"))
      }
    }

    /** The devnet's deployer mints every token: gas ether, then the mints, all simulated before any is sent. */
    const devnetFaucet = (): Faucet => {
      const minter = privateKeyToAccount(DEVNET_DEPLOYER_KEY)
      return {
        fund: (to, grant) =>
          queueOf(minter.address)
            .withPermits(1)(
              Effect.gen(function* () {
                const mints = [{ token: usd1.address, amount: grant.usd1 }, ...grant.tokens].filter(
                  ({ amount }) => amount > 0n
                )
                const calls: ReadonlyArray<{ readonly what: string; readonly call: Call }> = [
                  { what: "gas", call: { to, data: "0x", value: FAUCET_GAS } },
                  ...mints.map(({ token, amount }) => ({
                    what: `mint ${token}`,
                    call: {
                      to: token,
                      data: encodeFunctionData({ abi: mintAbi, functionName: "mint", args: [to, amount] })
                    }
                  }))
                ]
                const gas = yield* Effect.forEach(
                  calls,
                  ({ what, call }) =>
                    simulate(minter.address, call).pipe(
                      Effect.mapError((refused) => new ChainError({ message: `faucet: ${what}: ${refused.reason}` }))
                    ),
                  { concurrency: "unbounded" }
                )
                const sent = yield* Effect.forEach(calls, ({ call }, i) => signAndSend(minter, call, gas[i]!, noRecord))
                yield* Effect.forEach(sent, ({ hash }) => minedSuccessfully("faucet", hash), {
                  concurrency: "unbounded"
                })
              })
            )
            .pipe(Effect.withSpan("Faucet.fund", { attributes: { "chain.to": to } }))
      }
    }

    return ChainClient.of({
      chainId: deployment.chainId,
      network: `eip155:${deployment.chainId}`,
      usd1,
      relayer: relayer.address,
      verifyMessage,
      verifyAuthorization,
      balanceOf,
      balances,
      authorizationState,
      authorizationUsedIn,
      usd1DomainSeparator,
      transferWithAuthorization,
      rebroadcast,
      receipt,
      feedRound,
      tokenPaused,
      blockTime,
      exchange: deployment.exchange,
      account,
      faucet: deployment.local ? Option.some(devnetFaucet()) : Option.none()
    })
  })
)
