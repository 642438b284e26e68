/**
 * `ChainClient` over JSON-RPC, for the deployment in `ChainDeployment` (the embedded devnet or a
 * configured chain): the reads (the transfer check, balances, signatures, feeds, receipts caught by
 * the block watcher) and the wiring of what sends. Calls go over kept-alive connections
 * (`JsonRpc.ts`): reads bounded by CHAIN_TIMEOUT with one retry, broadcasts by BROADCAST_TIMEOUT_MS
 * and never repeated with a new nonce. Sending is `Transactions.ts` (simulate, sign, record,
 * broadcast), `Relayer.ts` (the payers' transfers, pipelined) and `ChainAccounts.ts` (the
 * service's own accounts, the devnet's faucet); fees are `FeeEstimate.ts`'s. The payment path's hot
 * calls (the transfer check, the relayer's send, receipts) are made directly; viem's actions serve
 * the rest. One unit: the port's reads, each a few lines over the same connections and watcher.
 */
import { Duration, Effect, Either, Layer, Option } from "effect"
import {
  type Chain,
  createPublicClient,
  custom,
  defineChain,
  erc20Abi,
  getAddress,
  type Hash,
  type Hex,
  hashTypedData,
  hexToBigInt,
  isAddressEqual,
  parseAbiItem,
  parseEventLogs,
  toEventSelector,
  toHex
} from "viem"
import type { Address } from "./Address.js"
import { type BlockHead, type BlockWatcher, blockWatcher, NoBlockReceipts, type RawReceipt } from "./BlockWatcher.js"
import {
  aggregate3,
  authorizationStateOf,
  balanceOfCall,
  decimalsCall,
  latestRoundDataCall,
  pausedCall,
  transferCall
} from "./Calldata.js"
import { chainAccounts } from "./ChainAccounts.js"
import {
  ChainClient,
  ChainError,
  type FeedState,
  type Receipt,
  type TransferAuthorization,
  type TransferCheck
} from "./ChainClient.js"
import { PriceFeedArtifact, StockTokenArtifact, Usd1Artifact } from "./contracts/artifacts.js"
import { ChainDeployment } from "./Deployment.js"
import { allowanceCall, noncesCall } from "./Eip2612.js"
import { transferWithAuthorizationTypedData } from "./Eip3009.js"
import { BASE_FEE_MULTIPLIER, feeEstimate } from "./FeeEstimate.js"
import { isUnreachable, RpcEndpointFault } from "./JsonRpc.js"
import { balanceReads, balancesRead, chunksOf, MULTICALL_CHUNK, MULTICALL3_ADDRESS, rowsOf } from "./Multicall.js"
import { chainCall, decodedRevert, errorText, isMissingFunction, readsOver } from "./NodeErrors.js"
import { relayer as makeRelayer } from "./Relayer.js"
import { rpcPool } from "./RpcPool.js"
import { recoverMessageSigner, recoverSigner } from "./Secp256k1.js"
import { sendQueues } from "./SendQueues.js"
import { checkChain } from "./StartupCheck.js"
import { transactions } from "./Transactions.js"

const authorizationUsedEvent = parseAbiItem(
  "event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)"
)

/** How long a send waits for a receipt it needs before going on (an approval, the faucet's mints). */
const RECEIPT_TIMEOUT_MS = 30_000
/** The block watcher's head poll while no receipt is awaited (at least CHAIN_POLL_INTERVAL). */
const IDLE_POLL_MS = 1_000
/** A sent transaction whose receipt nobody awaits is no longer watched for after this long. */
const UNAWAITED_FORGOTTEN_MS = 2 * RECEIPT_TIMEOUT_MS
/** Chunks of one bulk read (a multicall's, a range of logs') asked at once. */
const CHUNKS_IN_FLIGHT = 4
/** The longest a broadcast may take: longer than a read, as a node may check a transaction first. */
const BROADCAST_TIMEOUT_MS = 10_000
/** ERC-20 `Transfer(address indexed from, address indexed to, uint256 value)`: topic 0 of its logs. */
const TRANSFER_TOPIC = toEventSelector("Transfer(address,address,uint256)")
const APPROVAL_TOPIC = toEventSelector("Approval(address,address,uint256)")
/** Blocks per `eth_getLogs`: providers refuse wider ranges (many cap them at 2,000 to 10,000 blocks). */
export const LOG_BLOCKS_PER_CALL = 2_000n

/** `fromBlock` to `toBlock` (both included) as consecutive ranges of at most `size` blocks. */
export const blockRanges = (
  fromBlock: bigint,
  toBlock: bigint,
  size: bigint
): ReadonlyArray<readonly [bigint, bigint]> => {
  const ranges: Array<readonly [bigint, bigint]> = []
  for (let from = fromBlock; from <= toBlock; from += size) {
    ranges.push([from, toBlock < from + size - 1n ? toBlock : from + size - 1n])
  }
  return ranges
}

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
    const read = readsOver(reads)

    // A configured chain only: the embedded devnet's contracts are ours, checked when it starts.
    // Not a failure anything could handle: the start ends with its one line (Launch.ts).
    if (!deployment.local) yield* checkChain({ chainId, usd1: usd1.address }, read).pipe(Effect.orDie)

    const queueOf = sendQueues()
    const fees = feeEstimate(publicClient, chain, deployment.relayerFees.maxFeePerGas)
    // The block watcher is made last: it calls the relayer on each head; what sends expects its
    // transactions to be caught by it.
    const watched = () => watcher
    const tx = transactions({ chainId, reads, read, writes, fees, queueOf, watcher: watched })
    const relayer = yield* makeRelayer({ deployment, read, fees, transactions: tx, queueOf, watcher: watched })

    const blockReceiptsOf = (number: bigint) =>
      Effect.tryPromise({
        try: (signal) =>
          reads.request<ReadonlyArray<RawReceipt> | null>("eth_getBlockReceipts", [toHex(number)], signal),
        catch: (cause) =>
          cause instanceof RpcEndpointFault && cause.reason === "method-unavailable"
            ? new NoBlockReceipts()
            : new ChainError({ message: `block receipts: ${errorText(cause)}`, cause })
      }).pipe(
        Effect.flatMap((receipts) =>
          receipts === null
            ? Effect.fail(new ChainError({ message: `block ${number} is not known to the node yet` }))
            : Effect.succeed(receipts)
        )
      )

    const watcher: BlockWatcher = yield* blockWatcher(
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
          Effect.tap((head) => fees.forgetOutrunBy(head.baseFeePerGas))
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
            Effect.zipRight(relayer.checkNonceNow(`chain head went back: ${why}`))
          ),
        newHead: relayer.newHead
      }
    )

    /** Reverted with all its gas used: read from the transaction's own gas limit. */
    const ranOutOfGas = (hash: Hash, raw: RawReceipt) =>
      read<{ readonly gas: Hex } | null>("transaction", "eth_getTransactionByHash", [hash]).pipe(
        Effect.map((tx) => tx !== null && hexToBigInt(raw.gasUsed) >= hexToBigInt(tx.gas)),
        Effect.tap((outOfGas) =>
          Effect.sync(() => {
            if (outOfGas) relayer.forgetTransferGas()
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
          Option.isNone(raw) && timeoutMs > 0 && relayer.addresses.some((address) => watcher.sentBy(hash, address))
            ? relayer.checkNonceNow(`the relayer's transaction ${hash} was not mined within ${timeoutMs} ms`)
            : Effect.void
        ),
        Effect.flatMap(
          Option.match({
            onNone: () => Effect.succeed(Option.none<Receipt>()),
            // the receipt of a fee bump of it, when that is the version mined
            onSome: (raw) =>
              relayer
                .noteReceipt(raw)
                .pipe(Effect.zipRight(toReceipt(raw.transactionHash, raw)), Effect.map(Option.some))
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
        () => recoverMessageSigner(message, signature),
        (client) => client.verifyMessage({ address, message, signature })
      )

    const authorizationSigned = (authorization: TransferAuthorization, signature: Hex) => {
      const hash = hashTypedData(transferWithAuthorizationTypedData(authorization, { chainId, usd1 }))
      return signedBy(
        "verify authorization",
        authorization.from,
        () => recoverSigner(hash, signature),
        (client) => client.verifyHash({ address: authorization.from, hash, signature })
      )
    }

    /**
     * One `aggregate3` of `calls` at `blockTag` (one `eth_call`), its answers read by `interpret`:
     * answers it cannot read (it throws) are a ChainError named `what`, as a failed call is.
     */
    const aggregated = <A>(
      what: string,
      calls: ReadonlyArray<{ readonly target: Address; readonly allowFailure: boolean; readonly callData: Hex }>,
      blockTag: "pending" | "latest",
      interpret: (answers: ReadonlyArray<{ readonly success: boolean; readonly returnData: Hex }>) => A
    ) =>
      read<Hex>(what, "eth_call", [{ to: MULTICALL3_ADDRESS, data: aggregate3.encode([calls]) }, blockTag]).pipe(
        Effect.flatMap((result) =>
          Effect.try({
            try: () =>
              interpret(
                (aggregate3.decode(result) as unknown as [ReadonlyArray<{ success: boolean; returnData: Hex }>])[0]
              ),
            catch: (cause) => new ChainError({ message: `${what}: ${errorText(cause)}`, cause })
          })
        )
      )

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
      return aggregated(
        "transfer check",
        calls,
        "pending",
        ([state, balance, transfer]): TransferCheck => ({
          used: authorizationStateOf.decode(state!.returnData)[0] as boolean,
          balance: balanceOfCall.decode(balance!.returnData)[0] as bigint,
          refusal: transfer!.success
            ? Option.none()
            : Option.some(decodedRevert(transfer!.returnData) ?? "the transfer reverts without a reason")
        })
      ).pipe(Effect.withSpan("ChainClient.transferCheck"))
    }

    const balanceOf = (token: Address, owner: Address) =>
      chainCall("balanceOf", () =>
        publicClient.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
      )

    const balances = (owners: ReadonlyArray<Address>, tokens: ReadonlyArray<Address>) => {
      const reads = owners.flatMap((owner) => tokens.map((token) => ({ token, owner })))
      return Effect.forEach(
        chunksOf(reads, MULTICALL_CHUNK),
        (chunk) =>
          read<Hex>("balances (multicall)", "eth_call", [
            { to: MULTICALL3_ADDRESS, data: balanceReads(chunk) },
            "latest"
          ]).pipe(
            Effect.flatMap((result) =>
              Effect.try({
                try: () => balancesRead(result, chunk.length),
                catch: (cause) => new ChainError({ message: `balances (multicall): ${errorText(cause)}`, cause })
              })
            )
          ),
        { concurrency: CHUNKS_IN_FLIGHT }
      ).pipe(
        Effect.map((results) => rowsOf(results.flat(), owners.length, tokens.length)),
        Effect.withSpan("ChainClient.balances", { attributes: { owners: owners.length, tokens: tokens.length } })
      )
    }

    /**
     * The parties of the USD1 `Transfer` and `Approval` logs of the blocks (one `eth_getLogs` of both
     * per LOG_BLOCKS_PER_CALL blocks).
     */
    const usd1Parties = (fromBlock: bigint, toBlock: bigint) =>
      Effect.forEach(
        blockRanges(fromBlock, toBlock, LOG_BLOCKS_PER_CALL),
        ([from, to]) =>
          read<ReadonlyArray<{ readonly topics: ReadonlyArray<Hex> }>>("USD1 logs", "eth_getLogs", [
            {
              address: usd1.address,
              topics: [[TRANSFER_TOPIC, APPROVAL_TOPIC]],
              fromBlock: toHex(from),
              toBlock: toHex(to)
            }
          ]).pipe(
            Effect.flatMap((logs) =>
              Effect.try({
                // topics 1 and 2: the indexed `from` and `to` (`owner` and `spender`), each an address in a 32-byte word
                try: () => logs.flatMap(({ topics }) => [1, 2].map((i) => getAddress(`0x${topics[i]!.slice(26)}`))),
                catch: (cause) => new ChainError({ message: `USD1 logs: ${errorText(cause)}`, cause })
              })
            )
          ),
        { concurrency: CHUNKS_IN_FLIGHT }
      ).pipe(
        Effect.map((parties): ReadonlyArray<Address> => [...new Set(parties.flat())]),
        Effect.withSpan("ChainClient.usd1Parties", {
          attributes: { "chain.from_block": String(fromBlock), "chain.to_block": String(toBlock) }
        })
      )

    const usd1Positions = (owners: ReadonlyArray<Address>, spender: Address) =>
      Effect.forEach(
        chunksOf(owners, MULTICALL_CHUNK / 2),
        (chunk) =>
          aggregated(
            "USD1 balances and allowances (multicall)",
            chunk.flatMap((owner) => [
              { target: usd1.address, allowFailure: false, callData: balanceOfCall.encode([owner]) },
              { target: usd1.address, allowFailure: false, callData: allowanceCall.encode([owner, spender]) }
            ]),
            "latest",
            (answers) =>
              chunk.map((_, i) => ({
                usd1: balanceOfCall.decode(answers[2 * i]!.returnData)[0] as bigint,
                allowance: allowanceCall.decode(answers[2 * i + 1]!.returnData)[0] as bigint
              }))
          ),
        { concurrency: CHUNKS_IN_FLIGHT }
      ).pipe(
        Effect.map((chunks) => chunks.flat()),
        Effect.withSpan("ChainClient.usd1Positions", { attributes: { owners: owners.length } })
      )

    const permitNonce = (owner: Address) =>
      read<Hex>("USD1 permit nonce", "eth_call", [
        { to: usd1.address, data: noncesCall.encode([owner]) },
        "latest"
      ]).pipe(Effect.map((result) => noncesCall.decode(result)[0] as bigint))

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

    /**
     * Every token's `latestRoundData()` and `paused()` (and a feed's `decimals()` until it is known)
     * in one `aggregate3`, each allowed to fail on its own: a feed that cannot answer fails its
     * token only; a token without `paused()` (no such function, no code) is open, as `tokenPaused` says.
     */
    const feedStates = (tokens: ReadonlyArray<{ readonly feed: Address; readonly token: Address }>) => {
      const unknownDecimals = [...new Set(tokens.map(({ feed }) => feed).filter((feed) => !feedDecimals.has(feed)))]
      const calls = [
        ...tokens.flatMap(({ feed, token }) => [
          { target: feed, allowFailure: true, callData: latestRoundDataCall.encode([]) },
          { target: token, allowFailure: true, callData: pausedCall.encode([]) }
        ]),
        ...unknownDecimals.map((feed) => ({ target: feed, allowFailure: true, callData: decimalsCall.encode([]) }))
      ]
      return aggregated("feeds (multicall)", calls, "latest", (answers) => {
        unknownDecimals.forEach((feed, i) => {
          const answer = answers[2 * tokens.length + i]!
          if (answer.success && answer.returnData.length === 66) {
            feedDecimals.set(feed, Number(decimalsCall.decode(answer.returnData)[0]))
          }
        })
        return tokens.map(({ feed }, i): Either.Either<FeedState, string> => {
          const round = answers[2 * i]!
          const paused = answers[2 * i + 1]!
          const decimals = feedDecimals.get(feed)
          if (!round.success || round.returnData.length < 2 + 64 * 5) {
            return Either.left(`latestRoundData(): ${decodedRevert(round.returnData) ?? "no answer"}`)
          }
          if (decimals === undefined) return Either.left("decimals(): no answer")
          if (!paused.success && paused.returnData !== "0x") {
            return Either.left(`paused(): ${decodedRevert(paused.returnData) ?? "reverted"}`)
          }
          const [, answer, , updatedAt] = latestRoundDataCall.decode(round.returnData) as unknown as [
            bigint,
            bigint,
            bigint,
            bigint
          ]
          return Either.right({
            round: { answer, decimals, updatedAt },
            // no such function, or no code: no pause flag
            paused:
              paused.success && paused.returnData.length === 66 && Boolean(pausedCall.decode(paused.returnData)[0])
          })
        })
      }).pipe(Effect.withSpan("ChainClient.feedStates", { attributes: { "chain.tokens": tokens.length } }))
    }

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

    const { account, devnetFaucet } = chainAccounts({
      usd1,
      exchange: deployment.exchange,
      publicClient,
      transactions: tx,
      fees,
      relayerFees: deployment.relayerFees,
      read,
      queueOf,
      minedSuccessfully
    })

    // Started last: it reads what the layer defines above (the transfer gas).
    yield* relayer.watchGas

    return ChainClient.of({
      chainId,
      network: `eip155:${chainId}`,
      usd1,
      relayers: relayer.addresses,
      relayerFunded: relayer.funded,
      relayerPricedOut: relayer.pricedOut,
      verifyMessage,
      transferCheck,
      balanceOf,
      balances,
      usd1Parties,
      usd1Positions,
      permitNonce,
      authorizationState,
      authorizationUsedIn,
      authorizationSigned,
      usd1DomainSeparator,
      transferWithAuthorization: relayer.transferWithAuthorization,
      followRelayerNonce: relayer.followRelayerNonce,
      replaceStuck: relayer.replaceStuck,
      relayerNonceAlarm: relayer.nonceAlarm,
      relayerNonceTrouble: relayer.nonceTrouble,
      rebroadcast: tx.rebroadcast,
      receipt,
      feedRound,
      tokenPaused,
      feedStates,
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
