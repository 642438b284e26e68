/**
 * `ChainClient` over JSON-RPC, for the deployment in `ChainDeployment` (the embedded devnet or a
 * configured chain). Calls go over kept-alive connections (`JsonRpc.ts`): reads bounded by
 * CHAIN_TIMEOUT with one retry, broadcasts by BROADCAST_TIMEOUT_MS and never repeated with a new
 * nonce. Every sending account (the relayer, each agent wallet, the devnet's faucet) has one
 * ordered send queue; a transaction is signed here (chain id from the deployment, fees from a
 * short-lived cache), recorded by the caller, then broadcast. The payment path's hot calls (the
 * transfer check, the relayer's send, receipts) are made directly; viem's actions serve the rest.
 */
import { Duration, Effect, Layer, Option, Queue, Redacted, Schedule } from "effect"
import {
  type Abi,
  type AbiFunction,
  BaseError,
  type Chain,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  concatHex,
  createPublicClient,
  custom,
  decodeAbiParameters,
  decodeErrorResult,
  defineChain,
  Eip1559FeesNotSupportedError,
  encodeAbiParameters,
  encodeFunctionData,
  erc20Abi,
  getAddress,
  type Hash,
  type Hex,
  hashTypedData,
  hexToBigInt,
  hexToNumber,
  isAddressEqual,
  keccak256,
  maxUint256,
  type PrivateKeyAccount,
  parseAbiItem,
  parseEther,
  parseEventLogs,
  parseTransaction,
  RpcRequestError,
  recoverAddress,
  recoverMessageAddress,
  toFunctionSelector,
  toHex
} from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { countNonceGap, relayerGasMetrics } from "../observability/Metrics.js"
import type { Address } from "./Address.js"
import { type BlockHead, blockWatcher, NoBlockReceipts, type RawReceipt } from "./BlockWatcher.js"
import {
  CallReverted,
  type ChainAccount,
  ChainClient,
  ChainError,
  type Faucet,
  type NonceCheck,
  type Rebroadcast,
  type Receipt,
  type RecordSigned,
  type Resendable,
  type SignedPurpose,
  type SignedTransaction,
  type TransferAuthorization,
  type TransferCheck
} from "./ChainClient.js"
import { DemoExchangeArtifact, PriceFeedArtifact, StockTokenArtifact, Usd1Artifact } from "./contracts/artifacts.js"
import { ChainDeployment } from "./Deployment.js"
import { DEVNET_DEPLOYER_KEY } from "./Devnet.js"
import { transferWithAuthorizationTypedData } from "./Eip3009.js"
import { bumpedFees, cappedFees, type Fees } from "./FeeBump.js"
import { isUnreachable } from "./JsonRpc.js"
import { chunksOf, MULTICALL_CHUNK, MULTICALL3_ADDRESS, rowsOf } from "./Multicall.js"
import { rpcPool } from "./RpcPool.js"
import { sendQueues } from "./SendQueues.js"
import { checkChain } from "./StartupCheck.js"
import { wallClockPause } from "./WallClock.js"

/** viem's error text, with the node's own words and a revert reason when there is one. */
export const errorText = (cause: unknown): string => {
  if (cause instanceof RpcRequestError) return cause.details
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

/** Revert data as a reason: the `require` message, or the custom error's name; none when not ours. */
const decodedRevert = (data: Hex): string | undefined => {
  try {
    const decoded = decodeErrorResult({ abi: contractErrors, data })
    return decoded.errorName === "Error" ? String(decoded.args?.[0]) : decoded.errorName
  } catch {
    return undefined
  }
}

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
    const decoded = data === undefined ? undefined : decodedRevert(data)
    if (decoded !== undefined) return decoded
  }
  return errorText(cause)
}

const chainCall = <A>(what: string, f: (signal: AbortSignal) => Promise<A>) =>
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

/** One function's calldata and result codec, its selector computed once. */
const abiFunction = (signature: string) => {
  const item = parseAbiItem(signature) as AbiFunction
  const selector = toFunctionSelector(item)
  return {
    encode: (args: ReadonlyArray<unknown>): Hex => concatHex([selector, encodeAbiParameters(item.inputs, args)]),
    decode: (data: Hex) => decodeAbiParameters(item.outputs, data)
  }
}

const transferWithVrs = abiFunction(
  "function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)"
)
const transferWithBytes = abiFunction(
  "function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, bytes signature)"
)
const authorizationStateOf = abiFunction(
  "function authorizationState(address authorizer, bytes32 nonce) view returns (bool)"
)
const balanceOfCall = abiFunction("function balanceOf(address owner) view returns (uint256)")
const aggregate3 = abiFunction(
  "function aggregate3((address target, bool allowFailure, bytes callData)[] calls) payable returns ((bool success, bytes returnData)[] returnData)"
)

/** A transaction to send: where, what, and the ether it carries. */
interface Call {
  readonly to: Address
  readonly data: Hex
  readonly value?: bigint
}

/** A broadcast: sent, or refused for what a fresh signature can fix. */
type Broadcast =
  | { readonly _tag: "Sent" }
  | { readonly _tag: "Refused"; readonly stale: "nonce" | "fees"; readonly text: string }

/** Gas ether the devnet faucet gives with every grant. */
const FAUCET_GAS = parseEther("1")
/** How long a send waits for a receipt it needs before going on (an approval, the faucet's mints). */
const RECEIPT_TIMEOUT_MS = 30_000
/** The block watcher's head poll while no receipt is awaited (at least CHAIN_POLL_INTERVAL). */
const IDLE_POLL_MS = 1_000
/** A sent transaction whose receipt nobody awaits is no longer watched for after this long. */
const UNAWAITED_FORGOTTEN_MS = 2 * RECEIPT_TIMEOUT_MS
/** How soon a failed close of a relayer nonce gap is tried again. */
const CLOSE_RETRY_MS = 2_000
/** A node's words for a JSON-RPC method it does not have. */
const noSuchMethod = /method not found|not supported|does not exist|unsupported|not available|unknown method/i
/** Multicall chunks read at once. */
const BALANCE_READS_IN_FLIGHT = 4
/** The longest a broadcast may take: longer than a read, as a node may check a transaction first. */
const BROADCAST_TIMEOUT_MS = 10_000
/**
 * How long fee estimates are reused. Signed fees allow twice the base fee seen: a rise beyond that
 * within this time gets the transaction refused, and it is signed again with fresh fees.
 */
const FEES_REUSED_MS = 5_000
const BASE_FEE_MULTIPLIER = 2
/** Margin on a gas estimate used for this one call, and on the relayer's transfer gas reused for all. */
const GAS_MARGIN_ONE = [12n, 10n] as const
const GAS_MARGIN_REUSED = [3n, 2n] as const

/** What the node said to a broadcast it refused, when a fresh signature can fix it. */
const staleNonce = /nonce too low|replacement transaction underpriced/i
const lowFee = /fee per gas less than|fee cap|underpriced/i
const alreadyKnown = /already known|already imported|known transaction/i

const noRecord: RecordSigned<never, never> = () => Effect.void

/** `mint(to, amount)` of USD1 and of the stock tokens alike. */
const mintAbi = [parseAbiItem("function mint(address to, uint256 amount)")]

const withMargin = (gas: bigint, [numerator, denominator]: readonly [bigint, bigint]) => (gas * numerator) / denominator

/** The relayer's transfer gas before it was first estimated: above what `transferWithAuthorization` takes. */
const TRANSFER_GAS_GUESS = 120_000n

const maxFeeOf = (fee: Fees) => ("gasPrice" in fee ? fee.gasPrice : fee.maxFeePerGas)

export const EvmChain = Layer.scoped(
  ChainClient,
  Effect.gen(function* () {
    const deployment = yield* ChainDeployment
    const { usd1, chainId } = deployment
    const chain: Chain = defineChain({
      id: chainId,
      name: deployment.local ? "Devnet" : `Chain ${chainId}`,
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
      rpcUrls: { default: { http: [...deployment.rpcUrls] } },
      fees: { baseFeeMultiplier: BASE_FEE_MULTIPLIER }
    })
    const pollMs = Duration.toMillis(deployment.pollInterval)
    // Every endpoint's chain id is checked here; one on another chain ends the start (Launch.ts).
    const endpoints = yield* rpcPool(deployment.rpcUrls, {
      chainId,
      readTimeoutMs: Duration.toMillis(deployment.readTimeout),
      probeIntervalMs: Duration.toMillis(deployment.rpcProbeInterval)
    }).pipe(Effect.orDie)
    const connect = (timeoutMs: number, retryUnanswered: boolean) =>
      Effect.acquireRelease(
        Effect.sync(() => endpoints.client({ timeoutMs, retryUnanswered })),
        (rpc) => Effect.sync(rpc.close)
      )
    const reads = yield* connect(Duration.toMillis(deployment.readTimeout), true)
    // A broadcast is not repeated when the node may have read it (only a request written to a
    // kept-alive socket the node had closed goes out again). Re-sending the very same signed
    // transaction is the caller's decision (`rebroadcast`); a transaction with a new nonce replaces
    // only one the node refused (`signAndSend`).
    const writes = yield* connect(BROADCAST_TIMEOUT_MS, false)

    /** viem over `rpc`, for the reads it does well (contract reads, multicall, logs, signatures). */
    const viemOver = (rpc: (method: string, params: ReadonlyArray<unknown>) => Promise<unknown>) =>
      createPublicClient({
        chain,
        transport: custom({ request: ({ method, params }) => rpc(method, params ?? []) }, { retryCount: 0 }),
        pollingInterval: pollMs
      })
    const publicClient = viemOver(reads.request)
    const relayers = deployment.relayerKeys.map((key) => privateKeyToAccount(Redacted.value(key)))
    const queueOf = sendQueues()

    const read = <A>(what: string, method: string, params: ReadonlyArray<unknown>) =>
      chainCall(what, (signal) => reads.request<A>(method, params, signal))

    // A configured chain only: the embedded devnet's contracts are ours, checked when it starts.
    // Not a failure anything could handle: the start ends with its one line (Launch.ts).
    if (!deployment.local) yield* checkChain({ chainId, usd1: usd1.address }, read).pipe(Effect.orDie)

    /** The gas the call needs, sent by `from`; a refusal (a revert) is `CallReverted`, nothing sent. */
    const simulate = (from: Address, call: Call) =>
      Effect.tryPromise({
        try: (signal) =>
          reads.request<Hex>(
            "eth_estimateGas",
            [{ from, to: call.to, data: call.data, ...(call.value === undefined ? {} : { value: toHex(call.value) }) }],
            signal
          ),
        catch: (cause) =>
          isUnreachable(cause)
            ? new ChainError({ message: `estimate gas: ${errorText(cause)}`, cause })
            : new CallReverted({ reason: revertReason(cause) })
      }).pipe(Effect.map(hexToBigInt))

    /**
     * The exact call, run now as `from` would send it against the pending state (the transactions
     * already sent count, the block time is the next block's): a revert is `CallReverted`, nothing
     * sent. Unlike an estimate it needs no gas figure, so it is what a send that reuses a known gas
     * limit checks right before it signs.
     */
    const callAtPending = (from: Address, call: Call) =>
      Effect.tryPromise({
        try: (signal) =>
          reads.request<Hex>(
            "eth_call",
            [
              { from, to: call.to, data: call.data, ...(call.value === undefined ? {} : { value: toHex(call.value) }) },
              "pending"
            ],
            signal
          ),
        catch: (cause) =>
          isUnreachable(cause)
            ? new ChainError({ message: `simulate: ${errorText(cause)}`, cause })
            : new CallReverted({ reason: revertReason(cause) })
      }).pipe(Effect.asVoid, Effect.withSpan("ChainClient.simulate"))

    let fees: { readonly value: Fees; readonly until: number } | undefined
    const freshFees = () => (fees !== undefined && Date.now() < fees.until ? Effect.succeed(fees.value) : undefined)
    const readFees = Effect.suspend(() =>
      chainCall("fees", async (): Promise<Fees> => {
        try {
          const { maxFeePerGas, maxPriorityFeePerGas } = await publicClient.estimateFeesPerGas({
            chain,
            type: "eip1559"
          })
          return { maxFeePerGas, maxPriorityFeePerGas }
        } catch (error) {
          if (!(error instanceof Eip1559FeesNotSupportedError)) throw error
          return { gasPrice: (await publicClient.estimateFeesPerGas({ chain, type: "legacy" })).gasPrice }
        }
      }).pipe(
        Effect.tap((value) =>
          Effect.sync(() => {
            fees = { value, until: Date.now() + FEES_REUSED_MS }
          })
        )
      )
    )

    /** One estimate at a time: the sends that find it stale together wait for the same one. */
    const feesRead = Effect.unsafeMakeSemaphore(1)
    /** The node's fee estimate: EIP-1559 (twice the base fee, plus the node's tip), or a gas price. */
    const estimatedFees = Effect.suspend(
      () => freshFees() ?? feesRead.withPermits(1)(Effect.suspend(() => freshFees() ?? readFees))
    )

    /**
     * A block whose base fee the kept estimate no longer covers (a fee spike): the estimate is read
     * anew for the next signature, instead of sends being refused as underpriced until it expires.
     */
    const forgetFeesOutrunBy = (baseFee: bigint | undefined) =>
      Effect.sync(() => {
        if (fees === undefined || baseFee === undefined) return
        const room =
          "gasPrice" in fees.value ? fees.value.gasPrice : fees.value.maxFeePerGas - fees.value.maxPriorityFeePerGas
        if (baseFee > room) fees = undefined
      })

    const { relayerFees } = deployment
    /** Fees to sign with: the estimate, within MAX_FEE_PER_GAS. */
    const currentFees = Effect.map(estimatedFees, (estimate) => cappedFees(estimate, relayerFees.maxFeePerGas))

    /**
     * Each relayer key's gas watch: its balance read every RELAYER_BALANCE_INTERVAL, each transaction
     * it signs since counted against it at its worst cost (gas limit × max fee), so that asking
     * whether it can pay the next one costs no call. A key that no longer can leaves the rotation
     * (one WARN line), and comes back when it can again (one INFO line); the `relayer_gas_funded`
     * gauge follows, per key.
     */
    interface GasWatch {
      readonly account: PrivateKeyAccount
      readonly metrics: ReturnType<typeof relayerGasMetrics>
      balance: bigint | undefined
      funded: boolean
    }
    const gasWatches: ReadonlyArray<GasWatch> = relayers.map((account) => ({
      account,
      metrics: relayerGasMetrics(account.address),
      balance: undefined,
      funded: true
    }))
    const watchOf = (address: Address) => gasWatches.find((watch) => isAddressEqual(watch.account.address, address))!
    const judgeGas = (watch: GasWatch, balance: bigint) =>
      Effect.gen(function* () {
        watch.balance = balance
        watch.metrics.balance(balance)
        const needed = (transferGas ?? TRANSFER_GAS_GUESS) * maxFeeOf(yield* currentFees)
        const funded = balance >= needed
        watch.metrics.funded(funded)
        if (funded === watch.funded) return
        watch.funded = funded
        const inRotation = gasWatches.filter((other) => other.funded).length
        yield* (
          funded
            ? Effect.logInfo(`relayer key funded again: back in the rotation (${inRotation} of ${relayers.length})`)
            : Effect.logWarning(
                inRotation === 0
                  ? "relayer cannot pay gas for its next transaction: no key left, new payments answer 503 RELAYER_UNFUNDED until one is funded"
                  : `relayer cannot pay gas for its next transaction: the key leaves the rotation (${inRotation} of ${relayers.length} left)`
              )
        ).pipe(
          Effect.annotateLogs({
            "chain.relayer": watch.account.address,
            "relayer.balanceWei": String(balance),
            "relayer.neededWei": String(needed)
          })
        )
      })
    const readGas = (watch: GasWatch) =>
      read<Hex>("relayer balance", "eth_getBalance", [watch.account.address, "latest"]).pipe(
        Effect.flatMap((balance) => judgeGas(watch, hexToBigInt(balance))),
        // the last reading stands until a read answers
        Effect.catchTag("ChainError", () => Effect.void)
      )
    /** A transaction signed with `gas` and `fee` was sent: its worst cost is no longer there to spend. */
    const spentGas = (watch: GasWatch, gas: bigint, fee: Fees) =>
      Effect.suspend(() =>
        watch.balance === undefined ? Effect.void : judgeGas(watch, watch.balance - gas * maxFeeOf(fee))
      ).pipe(Effect.catchTag("ChainError", () => Effect.void))
    let rotation = 0
    /** The next relayer key in turn among those that can pay gas (all of them when none can: the send will tell). */
    const nextRelayer = Effect.sync(() => {
      const funded = gasWatches.filter((watch) => watch.funded)
      const from = funded.length > 0 ? funded : gasWatches
      return from[rotation++ % from.length]!
    })

    const pendingNonce = (address: Address) =>
      read<Hex>("nonce", "eth_getTransactionCount", [address, "pending"]).pipe(Effect.map(hexToNumber))

    /**
     * Broadcasts a freshly signed transaction once: "sent" (also when the node already has this very
     * transaction), or the refusal a fresh signature may fix (a stale nonce, a stale fee). Any other
     * failure is a `ChainError`, and whether the node took the transaction is then unknown.
     */
    const broadcast = (raw: Hex) =>
      Effect.tryPromise({
        try: (signal) => writes.request<Hash>("eth_sendRawTransaction", [raw], signal),
        catch: (cause) => cause
      }).pipe(
        Effect.as<Broadcast>({ _tag: "Sent" }),
        Effect.catchAll((cause) => {
          const text = errorText(cause)
          if (!isUnreachable(cause)) {
            if (alreadyKnown.test(text)) return Effect.succeed<Broadcast>({ _tag: "Sent" })
            if (staleNonce.test(text)) return Effect.succeed<Broadcast>({ _tag: "Refused", stale: "nonce", text })
            if (lowFee.test(text)) return Effect.succeed<Broadcast>({ _tag: "Refused", stale: "fees", text })
          }
          return Effect.fail(new ChainError({ message: `broadcast: ${text}`, cause }))
        })
      )

    /** The call signed by `signer` with `nonce` and `fee`. */
    const signCall = (signer: PrivateKeyAccount, call: Call, gas: bigint, nonce: number, fee: Fees) =>
      chainCall("sign", () =>
        signer.signTransaction({ chainId, nonce, gas, to: call.to, data: call.data, value: call.value, ...fee })
      ).pipe(Effect.map((raw): SignedTransaction => ({ sender: signer.address, hash: keccak256(raw), raw, nonce })))

    /**
     * Signs the call with the signer's next nonce on chain, lets `record` persist it, then
     * broadcasts it; a refusal is a `ChainError`. Runs inside the signer's queue, with the call's gas
     * decided. For the accounts that do not keep their nonce: agent wallets move between replicas and
     * the devnet's deployer key is shared with its operators, so their sends read the chain's count.
     */
    const signAndSend = <E, R>(
      signer: PrivateKeyAccount,
      call: Call,
      gas: bigint,
      record: RecordSigned<E, R>,
      purpose: SignedPurpose = "write"
    ) =>
      Effect.gen(function* () {
        const nonce = yield* pendingNonce(signer.address)
        const signed = yield* signCall(signer, call, gas, nonce, yield* currentFees)
        yield* record(signed, purpose)
        yield* watcher.expect(signed.hash, signer.address)
        const sent = yield* broadcast(signed.raw)
        if (sent._tag === "Sent") return signed
        if (sent.stale === "fees") fees = undefined
        return yield* new ChainError({ message: `broadcast refused: ${sent.text}` })
      })

    /**
     * Per relayer key, the nonces whose broadcast is on its way (journaled, not answered yet): the
     * chain does not count them yet, and they are no gap to close (`closeGap`).
     */
    const broadcasting = new Map<Address, Set<number>>()
    const broadcastsOf = (address: Address) => {
      const known = broadcasting.get(address)
      if (known !== undefined) return known
      const fresh = new Set<number>()
      broadcasting.set(address, fresh)
      return fresh
    }

    /** Relayer sends between their simulation and the node's answer to their broadcast (RELAYER_MAX_IN_FLIGHT). */
    const relayerInFlight = Effect.unsafeMakeSemaphore(relayerFees.maxInFlight)

    /**
     * The relayer's send, pipelined: the exact call is run against the pending state first (a
     * revert is `CallReverted`, nothing signed; unless the caller just did, `simulated`), then, holding the relayer's queue only for what
     * orders nonces (the nonce, the signature, `record`: no chain round trip while the next nonce is
     * known), the transaction takes the next nonce and is journaled; its broadcast goes out after the
     * queue is let go, so that the next send signs while this one travels. Up to RELAYER_MAX_IN_FLIGHT
     * sends are under way at once.
     *
     * Each send takes the next relayer key in turn among those that can pay gas (RELAYER_PRIVATE_KEYS).
     * A key keeps its next nonce between sends (its keys are this replica's own). A send that fails or
     * whose fate is unknown makes the next send learn it again: from the journal with `resendable`
     * (every recorded transaction above the chain's count sent again, `closeGap`), else from the
     * chain's count. One the node refuses for a stale nonce or fee is simulated, signed anew (and
     * recorded again: the refused one can never be mined) and broadcast, once.
     */
    const relayerSend = <E, R>(
      call: Call,
      gas: bigint,
      record: RecordSigned<E, R>,
      resendable?: Resendable,
      simulated = false
    ) =>
      Effect.gen(function* () {
        const watch = yield* nextRelayer
        const relayer = watch.account
        const queue = queueOf(relayer.address)
        const forget = queue.serially(queue.forget)
        for (let attempt = 1; ; attempt++) {
          // A send signed anew after a refusal is simulated again: time passed since the caller's.
          if (!(simulated && attempt === 1)) yield* callAtPending(relayer.address, call)
          const fee = yield* currentFees
          const signed = yield* queue.serially(
            Effect.gen(function* () {
              const nonce = yield* queue.nonce(
                resendable === undefined
                  ? pendingNonce(relayer.address)
                  : Effect.map(closeGap(relayer, resendable), (check) => check.next)
              )
              const signed = yield* signCall(relayer, call, gas, nonce, fee)
              // not recorded, not sent: the nonce is free again, and the chain and the journal say where to go on
              yield* record(signed, "write").pipe(Effect.tapError(() => queue.forget))
              yield* watcher.expect(signed.hash, relayer.address)
              yield* queue.sent(nonce)
              broadcastsOf(relayer.address).add(nonce)
              return signed
            })
          )
          const sent = yield* broadcast(signed.raw).pipe(
            Effect.tapError(() => forget),
            Effect.ensuring(Effect.sync(() => broadcastsOf(relayer.address).delete(signed.nonce)))
          )
          if (sent._tag === "Sent") {
            yield* spentGas(watch, gas, fee)
            return signed
          }
          yield* forget
          if (sent.stale === "fees") fees = undefined
          if (attempt > 1) return yield* new ChainError({ message: `broadcast refused: ${sent.text}` })
        }
      }).pipe(relayerInFlight.withPermits(1))

    /** The relayer key's empty transaction for `nonce`: fills a nonce no recorded transaction can take. */
    const fillNonce = (relayer: PrivateKeyAccount, nonce: number) =>
      Effect.gen(function* () {
        const fee = yield* currentFees
        const raw = yield* chainCall("sign", () =>
          relayer.signTransaction({ chainId, nonce, gas: 21_000n, to: relayer.address, value: 0n, ...fee })
        )
        yield* resend(raw)
      })

    /**
     * Sends a signed transaction once more; one the node has or has mined already counts as sent.
     * "underpriced": the node wants a higher fee for it now (a fee spike): it waits for its fee bump
     * (`replaceStuck`), it does not stop what sends it.
     */
    const resend = (raw: Hex) =>
      Effect.tryPromise({
        try: (signal) => writes.request<Hash>("eth_sendRawTransaction", [raw], signal),
        catch: (cause) => cause
      }).pipe(
        Effect.as<"sent" | "underpriced">("sent"),
        Effect.catchAll((cause) => {
          const text = errorText(cause)
          if (!isUnreachable(cause)) {
            if (alreadyKnown.test(text) || /nonce too low/i.test(text)) return Effect.succeed("sent" as const)
            if (lowFee.test(text)) return Effect.succeed("underpriced" as const)
          }
          return Effect.fail(new ChainError({ message: `resend: ${text}`, cause }))
        })
      )

    /**
     * Inside the relayer's queue: from the chain's pending count up to the relayer's next nonce (or,
     * when it is not known, past every recorded transaction), each nonce gets its recorded
     * transaction again or an empty one, in order. A node that lost blocks (a reorg, a restart from
     * a snapshot) or a transaction recorded but never broadcast (a crash) then holds nothing back.
     */
    const closeGap = (relayer: PrivateKeyAccount, resendable: Resendable) =>
      Effect.gen(function* () {
        const queue = queueOf(relayer.address)
        const local = yield* queue.known
        const chainNext = yield* pendingNonce(relayer.address)
        const recorded = yield* resendable(relayer.address, chainNext)
        const next =
          local !== undefined
            ? Math.max(local, chainNext)
            : recorded.reduce((end, tx) => Math.max(end, tx.nonce + 1), chainNext)
        let resent = 0
        let filled = 0
        const onItsWay = broadcastsOf(relayer.address)
        for (let nonce = chainNext; nonce < next; nonce++) {
          if (onItsWay.has(nonce)) continue
          const tx = recorded.find((candidate) => candidate.nonce === nonce)
          if (tx === undefined) {
            yield* fillNonce(relayer, nonce).pipe(Effect.tapError(() => queue.forget))
            filled++
          } else {
            // one the node now finds underpriced is not "sent again": its fee bump sends it (`replaceStuck`)
            if ((yield* resend(tx.raw).pipe(Effect.tapError(() => queue.forget))) === "sent") resent++
          }
        }
        yield* queue.continueAt(next)
        const check: NonceCheck = { chainNext, next, resent, filled }
        if (resent + filled > 0) {
          yield* Effect.logWarning(
            `relayer nonce gap: the chain counts ${chainNext}, the relayer was at ${local ?? "(unknown)"}; ` +
              `${resent} recorded transaction(s) sent again, ${filled} nonce(s) filled`
          ).pipe(Effect.annotateLogs({ "chain.relayer": relayer.address }))
          yield* countNonceGap(resent, filled)
        }
        return check
      }).pipe(
        Effect.tapBoth({
          // Tried again soon, not at the next tick: a gap left open holds every later payment. A
          // node that did not answer is the chain's outage (/ready and the outage log say so).
          onFailure: (error) =>
            isUnreachable(error.cause)
              ? Effect.void
              : Effect.sync(() => {
                  closeFailure = error.message
                }).pipe(
                  Effect.zipRight(
                    Effect.forkDaemon(
                      wallClockPause(CLOSE_RETRY_MS).pipe(
                        Effect.zipRight(checkNonceNow(`the last nonce gap close failed: ${error.message}`))
                      )
                    )
                  )
                ),
          onSuccess: () =>
            Effect.sync(() => {
              closeFailure = undefined
              queuedSince.delete(relayer.address)
            })
        }),
        Effect.withSpan("ChainClient.closeGap")
      )

    const followRelayerNonce = (resendable: Resendable) =>
      Effect.forEach(relayers, (relayer) => queueOf(relayer.address).serially(closeGap(relayer, resendable)))

    /** The fees a signed transaction carries. */
    const feesOf = (tx: ReturnType<typeof parseTransaction>): Fees =>
      tx.type === "legacy" || tx.type === "eip2930"
        ? { gasPrice: tx.gasPrice ?? 0n }
        : { maxFeePerGas: tx.maxFeePerGas ?? 0n, maxPriorityFeePerGas: tx.maxPriorityFeePerGas ?? 0n }

    const replaceStuck = <E, R>(
      stuck: { readonly sender: Address; readonly raw: Hex; readonly signedAt: Date; readonly bumps: number },
      record: RecordSigned<E, R>
    ) =>
      Effect.gen(function* () {
        const relayer = watchOf(stuck.sender).account
        const waited = Date.now() - stuck.signedAt.getTime()
        if (stuck.bumps >= relayerFees.maxBumps || waited < Duration.toMillis(relayerFees.stuckAfter)) {
          return Option.none<SignedTransaction>()
        }
        const tx = parseTransaction(stuck.raw)
        if (tx.nonce === undefined || tx.gas === undefined) return Option.none<SignedTransaction>()
        // The estimate now, not a cached one: the fee that left the transaction behind may be just that.
        fees = undefined
        const raised = bumpedFees(feesOf(tx), yield* estimatedFees, relayerFees.maxFeePerGas)
        if (Option.isNone(raised)) return Option.none<SignedTransaction>()
        const raw = yield* chainCall("sign", () =>
          relayer.signTransaction({
            chainId,
            nonce: tx.nonce!,
            gas: tx.gas!,
            to: tx.to ?? null,
            data: tx.data,
            value: tx.value,
            ...raised.value
          })
        )
        const signed: SignedTransaction = { sender: relayer.address, hash: keccak256(raw), raw, nonce: tx.nonce }
        yield* record(signed, "write")
        // Whoever waits for the stuck one gets this one's receipt if it is the one mined.
        yield* watcher.expect(signed.hash, relayer.address, keccak256(stuck.raw))
        // One the node refuses (a fee still too low) stays journaled: it is bumped again when due.
        yield* resend(raw)
        return Option.some(signed)
      }).pipe(
        queueOf(stuck.sender).serially,
        Effect.withSpan("ChainClient.replaceStuck", { attributes: { "chain.bumps": stuck.bumps } })
      )

    /** Simulates, signs, records and broadcasts one call from the signer's queue. */
    const send = <E, R>(signer: PrivateKeyAccount, call: Call, record: RecordSigned<E, R>) =>
      queueOf(signer.address).serially(
        Effect.flatMap(simulate(signer.address, call), (gas) =>
          signAndSend(signer, call, withMargin(gas, GAS_MARGIN_ONE), record)
        )
      )

    /** The relayer's (v, r, s) transfer gas: estimated once, reused with a margin; forgotten after an out-of-gas revert. */
    let transferGas: bigint | undefined

    // -----------------------------------------------------------------------------------------------
    // Receipts by block, and the relayer's nonce checked at once when the chain says it may be off

    /** Why the relayer's nonce must be checked now, for the merchant's tracker (`relayerNonceAlarm`). */
    const nonceAlarms = yield* Queue.sliding<string>(1)
    const checkNonceNow = (why: string) => Effect.asVoid(Queue.offer(nonceAlarms, why))
    /** The last close of a nonce gap failed: why. */
    let closeFailure: string | undefined
    /** Per relayer key, the chain's pending count below its next nonce, with its transactions in flight: since when. */
    const queuedSince = new Map<Address, { readonly at: number; readonly chainNext: number; readonly local: number }>()
    const queuedStuckAfter = deployment.nonceGapStuckAfter

    /**
     * On a new head while relayer transactions are overdue (not in the blocks after their broadcast):
     * a chain counting fewer pending than the relayer's next nonce holds some of them queued (or lost
     * them). Seen on two heads running, the nonce is checked at once. Nothing overdue, nothing read.
     */
    const checkRelayerQueue = Effect.forEach(relayers, ({ address }) =>
      Effect.gen(function* () {
        const local = yield* queueOf(address).known
        if (local === undefined || watcher.overdue(address) === 0) {
          queuedSince.delete(address)
          return
        }
        const chainNext = yield* pendingNonce(address)
        if (chainNext >= local) {
          queuedSince.delete(address)
          return
        }
        const before = queuedSince.get(address)
        queuedSince.set(address, { at: before?.at ?? Date.now(), chainNext, local })
        if (before !== undefined) {
          yield* checkNonceNow(
            `the chain counts ${chainNext} pending for relayer ${address}, whose next nonce is ${local}`
          )
        }
      }).pipe(Effect.ignore)
    )

    const blockReceiptsOf = (number: bigint) =>
      Effect.tryPromise({
        try: (signal) =>
          reads.request<ReadonlyArray<RawReceipt> | null>("eth_getBlockReceipts", [toHex(number)], signal),
        catch: (cause) =>
          !isUnreachable(cause) && noSuchMethod.test(errorText(cause))
            ? new NoBlockReceipts()
            : new ChainError({ message: `block receipts: ${errorText(cause)}`, cause })
      }).pipe(
        Effect.flatMap((receipts) =>
          receipts === null
            ? Effect.fail(new ChainError({ message: `block ${number} is not known to the node yet` }))
            : Effect.succeed(receipts)
        )
      )

    const watcher = yield* blockWatcher(
      {
        head: read<{
          number: Hex
          hash: Hash
          parentHash: Hash
          timestamp: Hex
          baseFeePerGas?: Hex
          transactions: ReadonlyArray<Hash>
        }>("head", "eth_getBlockByNumber", ["latest", false]).pipe(
          Effect.map(
            (block): BlockHead => ({
              number: hexToBigInt(block.number),
              hash: block.hash,
              parentHash: block.parentHash,
              timestamp: hexToBigInt(block.timestamp),
              ...(block.baseFeePerGas === undefined ? {} : { baseFeePerGas: hexToBigInt(block.baseFeePerGas) }),
              transactions: block.transactions
            })
          ),
          // every poll, advanced or not: a fee spike is seen at the first head that shows it
          Effect.tap((head) => forgetFeesOutrunBy(head.baseFeePerGas))
        ),
        // Each its own call, all at once: one round trip.
        blockReceipts: (numbers) => Effect.forEach(numbers, blockReceiptsOf, { concurrency: "unbounded" }),
        receipts: (hashes) =>
          Effect.forEach(hashes, (hash) => read<RawReceipt | null>("receipt", "eth_getTransactionReceipt", [hash]), {
            concurrency: "unbounded"
          })
      },
      {
        pollMs,
        idleMs: Math.max(pollMs, IDLE_POLL_MS),
        forgetAfterMs: UNAWAITED_FORGOTTEN_MS,
        headWentBack: (why) =>
          Effect.logWarning(`chain head went back: ${why}; checking the relayer's nonce now`).pipe(
            Effect.zipRight(checkNonceNow(`chain head went back: ${why}`))
          ),
        newHead: () => checkRelayerQueue
      }
    )

    const relayerNonceTrouble = Effect.sync((): Option.Option<string> => {
      if (closeFailure !== undefined) return Option.some(`a relayer nonce gap could not be closed: ${closeFailure}`)
      for (const [address, queued] of queuedSince) {
        if (Date.now() - queued.at >= Duration.toMillis(queuedStuckAfter)) {
          return Option.some(
            `relayer nonce gap: the chain counts ${queued.chainNext} pending, relayer ${address}'s next nonce is ` +
              `${queued.local}, for over ${Duration.format(queuedStuckAfter)}`
          )
        }
      }
      return Option.none()
    })

    /** Reverted with all its gas used: read from the transaction's own gas limit. */
    const ranOutOfGas = (hash: Hash, raw: RawReceipt) =>
      read<{ readonly gas: Hex } | null>("transaction", "eth_getTransactionByHash", [hash]).pipe(
        Effect.map((tx) => tx !== null && hexToBigInt(raw.gasUsed) >= hexToBigInt(tx.gas)),
        Effect.tap((outOfGas) =>
          Effect.sync(() => {
            if (outOfGas) transferGas = undefined
          })
        )
      )

    const toReceipt = (hash: Hash, raw: RawReceipt) =>
      Effect.map(
        raw.status === "0x1" ? Effect.succeed(false) : ranOutOfGas(hash, raw),
        (outOfGas): Receipt => ({
          hash,
          status: raw.status === "0x1" ? "success" : "reverted",
          outOfGas,
          blockNumber: hexToBigInt(raw.blockNumber),
          blockHash: raw.blockHash,
          transfers: parseEventLogs({ abi: erc20Abi, eventName: "Transfer", logs: raw.logs as never }).map((log) => ({
            token: getAddress(log.address),
            from: getAddress(log.args.from),
            to: getAddress(log.args.to),
            value: log.args.value
          }))
        })
      )

    /**
     * The receipt, caught by the block watcher within `timeoutMs`. A relayer's transaction not
     * mined by then may be queued behind a nonce gap: the relayer's nonce is checked at once.
     */
    const receipt = (hash: Hash, timeoutMs: number) =>
      watcher.receipt([hash], timeoutMs).pipe(
        Effect.tap((raw) =>
          Option.isNone(raw) && timeoutMs > 0 && relayers.some(({ address }) => watcher.sentBy(hash, address))
            ? checkNonceNow(`the relayer's transaction ${hash} was not mined within ${timeoutMs} ms`)
            : Effect.void
        ),
        Effect.flatMap(
          Option.match({
            onNone: () => Effect.succeed(Option.none<Receipt>()),
            // the receipt of a fee bump of it, when that is the version mined
            onSome: (raw) => Effect.map(toReceipt(raw.transactionHash, raw), Option.some)
          })
        ),
        Effect.withSpan("ChainClient.receipt", { attributes: { "chain.tx": hash } })
      )

    const minedSuccessfully = (what: string, hash: Hash) =>
      receipt(hash, RECEIPT_TIMEOUT_MS).pipe(
        Effect.flatMap(
          Option.match({
            onNone: () => Effect.fail(new ChainError({ message: `${what}: transaction ${hash} not mined in time` })),
            onSome: (mined) =>
              mined.status === "success"
                ? Effect.void
                : Effect.fail(new ChainError({ message: `${what}: transaction ${hash} reverted` }))
          })
        )
      )

    /**
     * Whether `address` made the signature: recovered locally (`recover`) for an EOA; otherwise
     * checked on chain by viem (`onChain`: ERC-1271, ERC-6492, ERC-8010). viem reads a failed call as
     * "not signed", so its calls are watched: a node that did not answer is a `ChainError`, never a
     * verdict. A malformed signature is "not signed".
     */
    const signedBy = (
      what: string,
      address: Address,
      recover: () => Promise<Address>,
      onChain: (client: ReturnType<typeof viemOver>) => Promise<boolean>
    ) =>
      chainCall(what, async (signal) => {
        const signer = await recover().catch(() => undefined)
        if (signer !== undefined && isAddressEqual(signer, address)) return true
        let unanswered: unknown
        const watched = viemOver((method, params) =>
          reads.request(method, params, signal).catch((error: unknown) => {
            if (isUnreachable(error)) unanswered = error
            throw error
          })
        )
        const valid = await onChain(watched).catch(() => false)
        if (!valid && unanswered !== undefined) throw unanswered
        return valid
      })

    const verifyMessage = (address: Address, message: string, signature: Hex) =>
      signedBy(
        "verify message",
        address,
        () => recoverMessageAddress({ message, signature }),
        (client) => client.verifyMessage({ address, message, signature })
      )

    const authorizationSigned = (authorization: TransferAuthorization, signature: Hex) => {
      const hash = hashTypedData(transferWithAuthorizationTypedData(authorization, { chainId, usd1 }))
      return signedBy(
        "verify authorization",
        authorization.from,
        () => recoverAddress({ hash, signature }),
        (client) => client.verifyHash({ address: authorization.from, hash, signature })
      )
    }

    /**
     * `transferWithAuthorization`'s calldata: a 65-byte signature as (v, r, s), anything else as
     * bytes. Total over any bytes: the parts are cut, not parsed (a `v` of 0 or 1 is read as 27 or
     * 28, any other byte is passed as it is), and the token judges them (a bad one is its
     * "invalid signature"), so no signature can make this throw.
     */
    const transferCall = (a: TransferAuthorization, signature: Hex) => {
      const common = [a.from, a.to, a.value, a.validAfter, a.validBefore, a.nonce] as const
      // A contract wallet's signature goes through the bytes overload, which asks ERC-1271.
      if (signature.length !== 132) return { vrs: false, data: transferWithBytes.encode([...common, signature]) }
      const r = `0x${signature.slice(2, 66)}` as Hex
      const s = `0x${signature.slice(66, 130)}` as Hex
      const v = Number.parseInt(signature.slice(130, 132), 16)
      return { vrs: true, data: transferWithVrs.encode([...common, v < 2 ? v + 27 : v, r, s]) }
    }

    const transferCheck = (authorization: TransferAuthorization, signature: Hex) => {
      const token = usd1.address
      const calls = [
        {
          target: token,
          allowFailure: false,
          callData: authorizationStateOf.encode([authorization.from, authorization.nonce])
        },
        { target: token, allowFailure: false, callData: balanceOfCall.encode([authorization.from]) },
        { target: token, allowFailure: true, callData: transferCall(authorization, signature).data }
      ]
      // "pending": the transactions already sent count, and the block time is the next block's.
      return read<Hex>("transfer check", "eth_call", [
        { to: MULTICALL3_ADDRESS, data: aggregate3.encode([calls]) },
        "pending"
      ]).pipe(
        Effect.flatMap((result) =>
          Effect.try({
            try: (): TransferCheck => {
              const [[state, balance, transfer]] = aggregate3.decode(result) as unknown as [
                ReadonlyArray<{ readonly success: boolean; readonly returnData: Hex }>
              ]
              return {
                used: authorizationStateOf.decode(state!.returnData)[0] as boolean,
                balance: balanceOfCall.decode(balance!.returnData)[0] as bigint,
                refusal: transfer!.success
                  ? Option.none()
                  : Option.some(decodedRevert(transfer!.returnData) ?? "the transfer reverts without a reason")
              }
            },
            catch: (cause) => new ChainError({ message: `transfer check: ${errorText(cause)}`, cause })
          })
        ),
        Effect.withSpan("ChainClient.transferCheck")
      )
    }

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
      read<Hex>("authorizationState", "eth_call", [
        { to: usd1.address, data: authorizationStateOf.encode([authorizer, nonce]) },
        "latest"
      ]).pipe(Effect.map((result) => authorizationStateOf.decode(result)[0] as boolean))

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
      record: RecordSigned<E, R>,
      resendable?: Resendable,
      simulated = false
    ) => {
      const { vrs, data } = transferCall(authorization, signature)
      const call: Call = { to: usd1.address, data }
      // Its gas: estimated for a contract wallet's signature (it costs what its wallet costs), once
      // for (v, r, s) ones (an EOA's costs the same every time). Whatever the gas, the call is
      // simulated again right before it is signed (`callAtPending`): `transferCheck` ran before the
      // reservation, and the payer's other payments may have spent the balance since.
      const gas = Effect.suspend(() =>
        vrs && transferGas !== undefined
          ? Effect.succeed(transferGas)
          : simulate(relayers[0]!.address, call).pipe(
              Effect.map((estimate) => withMargin(estimate, vrs ? GAS_MARGIN_REUSED : GAS_MARGIN_ONE)),
              Effect.tap((reused) =>
                Effect.sync(() => {
                  if (vrs) transferGas = reused
                })
              )
            )
      )
      // Simulated by the caller: the estimate would be one more simulation (a gas limit not known yet).
      const simulatedAlready = simulated && vrs && transferGas !== undefined
      return Effect.flatMap(gas, (limit) => relayerSend(call, limit, record, resendable, simulatedAlready)).pipe(
        Effect.withSpan("ChainClient.transferWithAuthorization")
      )
    }

    const rebroadcast = (raw: Hex) => {
      const hash = keccak256(raw)
      return Effect.tryPromise({
        try: (signal) => writes.request<Hash>("eth_sendRawTransaction", [raw], signal),
        catch: (cause) => cause
      }).pipe(
        Effect.as<Rebroadcast>("known"),
        Effect.catchAll((cause) => {
          const text = errorText(cause)
          const unknownTo = isUnreachable(cause) || !(alreadyKnown.test(text) || /nonce too low/i.test(text))
          if (unknownTo) {
            // A node that answered "underpriced" is up: the fee spike is the chain's, not an outage.
            return !isUnreachable(cause) && lowFee.test(text)
              ? Effect.succeed<Rebroadcast>("underpriced")
              : Effect.fail(new ChainError({ message: `rebroadcast: ${text}`, cause }))
          }
          // The node's word alone does not say that it has this transaction: its hash does.
          return read<unknown>("rebroadcast", "eth_getTransactionByHash", [hash]).pipe(
            Effect.flatMap((known) =>
              known !== null
                ? Effect.succeed<Rebroadcast>("known")
                : alreadyKnown.test(text)
                  ? Effect.fail(new ChainError({ message: `rebroadcast: "${text}", yet ${hash} is unknown` }))
                  : Effect.succeed<Rebroadcast>("replaced")
            )
          )
        }),
        Effect.withSpan("ChainClient.rebroadcast", { attributes: { "chain.tx": hash } })
      )
    }

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

    const headBlock = read<Hex>("block number", "eth_blockNumber", []).pipe(Effect.map(hexToBigInt))

    /** The block watcher's last head: no call of its own (a read only before the watcher's first poll answered). */
    const watchedHead = Effect.suspend(() =>
      Option.match(watcher.latest(), {
        onSome: (head) => Effect.succeed({ number: head.number, time: head.timestamp }),
        onNone: () =>
          chainCall("latest block", () => publicClient.getBlock()).pipe(
            Effect.map((block) => ({ number: block.number, time: block.timestamp }))
          )
      })
    )

    // -----------------------------------------------------------------------------------------------
    // The service's own accounts

    const exchangeAddress = Option.match(deployment.exchange, {
      onNone: () => Effect.fail(new ChainError({ message: "no exchange is configured (EXCHANGE_ADDRESS)" })),
      onSome: (exchange) => Effect.succeed(exchange)
    })

    /**
     * Simulates a call that makes the exchange pull `amount` of `spent` from the signer. When the
     * only obstacle is the exchange's allowance, approves it for good (max, recorded like the call,
     * waited for) and simulates again; any other refusal sends nothing.
     */
    const simulateSpending = <E, R>(
      signer: PrivateKeyAccount,
      call: Call,
      spent: Address,
      amount: bigint,
      record: RecordSigned<E, R>
    ) =>
      simulate(signer.address, call).pipe(
        Effect.catchIf(
          (refused): refused is CallReverted => refused._tag === "CallReverted" && /allowance/i.test(refused.reason),
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
              const approval = yield* signAndSend(signer, approve, withMargin(gas, GAS_MARGIN_ONE), record, "approval")
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
        return yield* queueOf(signer.address).serially(
          Effect.flatMap(simulateSpending(signer, call, spent, amountIn, record), (gas) =>
            signAndSend(signer, call, withMargin(gas, GAS_MARGIN_ONE), record)
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
            .serially(
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
                      Effect.catchTag(
                        "CallReverted",
                        (refused) => new ChainError({ message: `faucet: ${what}: ${refused.reason}` })
                      )
                    ),
                  { concurrency: "unbounded" }
                )
                const sent = yield* Effect.forEach(calls, ({ call }, i) =>
                  signAndSend(minter, call, withMargin(gas[i]!, GAS_MARGIN_ONE), noRecord)
                )
                yield* Effect.forEach(sent, ({ hash }) => minedSuccessfully("faucet", hash), {
                  concurrency: "unbounded"
                })
              })
            )
            .pipe(Effect.withSpan("Faucet.fund", { attributes: { "chain.to": to } }))
      }
    }

    // Started last: it reads what the layer defines above (the transfer gas).
    yield* Effect.forEach(gasWatches, readGas, { concurrency: "unbounded" }).pipe(
      Effect.repeat(Schedule.spaced(relayerFees.balanceInterval)),
      Effect.forkScoped
    )

    return ChainClient.of({
      chainId,
      network: `eip155:${chainId}`,
      usd1,
      relayers: relayers.map((relayer) => relayer.address),
      relayerFunded: Effect.sync(() => gasWatches.some((watch) => watch.funded)),
      verifyMessage,
      transferCheck,
      balanceOf,
      balances,
      authorizationState,
      authorizationUsedIn,
      authorizationSigned,
      usd1DomainSeparator,
      transferWithAuthorization,
      followRelayerNonce,
      replaceStuck,
      relayerNonceAlarm: Queue.take(nonceAlarms),
      relayerNonceTrouble,
      rebroadcast,
      receipt,
      feedRound,
      tokenPaused,
      blockTime,
      headBlock,
      watchedHead,
      exchange: deployment.exchange,
      account,
      faucet: deployment.local ? Option.some(devnetFaucet()) : Option.none(),
      endpoints: Effect.sync(endpoints.states)
    })
  })
)
