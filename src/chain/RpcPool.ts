/**
 * The chain's JSON-RPC endpoints (CHAIN_RPC_URL, several separated by commas) as one `JsonRpc`:
 *
 * - a read goes to the best endpoint in use (`EndpointRanking.ts`: up first, by stability and
 *   latency); the next is asked too when it refuses or has not answered within a share of the
 *   read's one bound (hedging), so a silent endpoint cannot use all of it. The chain's JSON-RPC
 *   error (a revert) is an answer and is not tried elsewhere; the endpoint's own error (a rate
 *   limit, a server error, a method it lacks: `RpcErrorClass.ts`) sends the read to the next
 *   endpoint at once;
 * - an endpoint that rate-limits us or fails on its side is degraded: tried after the others for a
 *   backoff (its `Retry-After`, else doubling from 1 s to 60 s per fault in a row), still used when
 *   no other answers;
 * - `eth_sendRawTransaction` goes to every endpoint in use at once: a transaction one node drops or
 *   never receives still reaches the chain through the others. The first acceptance answers; a node
 *   saying it already has the transaction ("already known", or "nonce too low" once it is mined)
 *   counts as one when that node finds the transaction by its hash;
 * - with several endpoints each is probed (`eth_blockNumber`) every CHAIN_RPC_PROBE_INTERVAL: a
 *   probe brings a down endpoint back, and its latency ranks it. A call that gets no answer marks its
 *   endpoint down at once. One endpoint alone is never probed: its state is its last call's.
 *
 * Each endpoint's chain id is checked at start (one on another chain ends the start); one that did
 * not answer then is used only once a probe found it on the configured chain. The URLs never leave
 * this module: endpoints are named by position and host in logs, metrics and `/ready`.
 */
import { Effect, type Scope } from "effect"
import { type Hash, type Hex, hexToNumber, keccak256, RpcRequestError } from "viem"
import { rpcEndpointMetrics } from "../observability/Metrics.js"
import type { RpcEndpointState } from "./ChainClient.js"
import { type EndpointHealth, type EndpointStatus, meanLatency, type Probe, rankEndpoints } from "./EndpointRanking.js"
import { type JsonRpc, type JsonRpcOptions, jsonRpcClient, RpcEndpointFault, RpcUnreachable } from "./JsonRpc.js"
import { type ChainMisconfigured, checkEndpointChains, type EndpointChain } from "./StartupCheck.js"
import { wallClockPause } from "./WallClock.js"

export interface RpcPoolOptions {
  /** The chain every endpoint must be on. */
  readonly chainId: number
  /** CHAIN_TIMEOUT: the start-up check's bound; a probe gets half of it (what a read gives each of two endpoints). */
  readonly readTimeoutMs: number
  readonly probeIntervalMs: number
}

export interface RpcPool {
  /** A client over every endpoint, each call within `timeoutMs` whatever endpoints it tries. */
  readonly client: (options: JsonRpcOptions) => JsonRpc
  readonly states: () => ReadonlyArray<RpcEndpointState>
}

/** Probes kept per endpoint for its rank (as viem's ranking keeps). */
const PROBES_KEPT = 10

/** An endpoint's backoff after its own fault without `Retry-After`: doubling from the first to the last. */
const FIRST_BACKOFF_MS = 1_000
const LAST_BACKOFF_MS = 60_000
/** The longest `Retry-After` honoured: a spent daily quota must not take an endpoint away for a day unseen. */
const LONGEST_RETRY_AFTER_MS = 300_000

/** A node's words for "I have this transaction already" (or its nonce was used, maybe by it). */
const alreadyHas = /already known|already imported|known transaction|nonce too low/i

interface Endpoint {
  /** Position in the configuration, from 1. */
  readonly position: number
  readonly host: string
  readonly url: string
  /** The pool's own calls (start-up check, probes, hash lookups). */
  readonly own: JsonRpc
  readonly metrics: ReturnType<typeof rpcEndpointMetrics>
  status: EndpointStatus
  probes: Array<Probe>
  /** The status last logged, to log changes once. */
  logged: EndpointStatus
  /** Its own faults in a row (rate limits, server errors), for the backoff. */
  faults: number
  /** Until when it is degraded (ms since the epoch; 0: not), and why. */
  degradedUntil: number
  degradedBy: "rate-limited" | "server-error" | undefined
  /** Whether it was degraded when last logged. */
  loggedDegraded: boolean
}

type BroadcastAnswer =
  | { readonly _tag: "Accepted"; readonly hash: Hash }
  | { readonly _tag: "Refused" | "Unreachable"; readonly error: unknown }

const messageOf = (error: unknown) => (error instanceof Error ? error.message : String(error))

/**
 * The endpoints of `urls`, checked (each one answering must be on `chainId`, at least one must
 * answer), probed while the scope is open when there are several.
 */
export const rpcPool = (
  urls: ReadonlyArray<string>,
  options: RpcPoolOptions
): Effect.Effect<RpcPool, ChainMisconfigured, Scope.Scope> =>
  Effect.gen(function* () {
    const single = urls.length === 1
    const probeTimeoutMs = Math.max(1, Math.floor(options.readTimeoutMs / 2))
    const endpoints: ReadonlyArray<Endpoint> = urls.map((url, i) => {
      const host = new URL(url).host
      return {
        position: i + 1,
        host,
        url,
        // One endpoint alone retries a read that got no answer (there is no other to try).
        own: jsonRpcClient(url, { timeoutMs: options.readTimeoutMs, retryUnanswered: single }),
        metrics: rpcEndpointMetrics(i + 1, host),
        status: "unchecked",
        probes: [],
        logged: "unchecked",
        faults: 0,
        degradedUntil: 0,
        degradedBy: undefined,
        loggedDegraded: false
      }
    })
    const opened: Array<JsonRpc> = endpoints.map((endpoint) => endpoint.own)
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        for (const rpc of opened) rpc.close()
      })
    )

    const setStatus = (endpoint: Endpoint, status: EndpointStatus) => {
      endpoint.status = status
      endpoint.metrics.up(status === "up")
    }
    const isDegraded = (endpoint: Endpoint) => endpoint.degradedUntil > Date.now()
    /** An answer ends a degradation whose backoff has passed (one given during it was a last resort). */
    const recovered = (endpoint: Endpoint) => {
      if (endpoint.degradedUntil === 0 || isDegraded(endpoint)) return
      endpoint.faults = 0
      endpoint.degradedUntil = 0
      endpoint.degradedBy = undefined
      endpoint.metrics.degraded(false)
    }
    const answered = (endpoint: Endpoint) => {
      endpoint.metrics.call("answered")
      if (endpoint.status === "down") setStatus(endpoint, "up")
      recovered(endpoint)
    }
    const unreachable = (endpoint: Endpoint) => {
      endpoint.metrics.call("unreachable")
      if (endpoint.status === "up") setStatus(endpoint, "down")
    }
    /** Its own error: degraded for a backoff, but for a method it lacks (the others it has). */
    const faulted = (endpoint: Endpoint, fault: RpcEndpointFault) => {
      endpoint.metrics.call("endpoint-error")
      if (endpoint.status === "down") setStatus(endpoint, "up")
      if (fault.reason === "method-unavailable") return
      endpoint.faults++
      const backoff =
        fault.retryAfterMs === undefined
          ? Math.min(LAST_BACKOFF_MS, FIRST_BACKOFF_MS * 2 ** (endpoint.faults - 1))
          : Math.min(LONGEST_RETRY_AFTER_MS, fault.retryAfterMs)
      endpoint.degradedUntil = Math.max(endpoint.degradedUntil, Date.now() + backoff)
      endpoint.degradedBy = fault.reason
      endpoint.metrics.degraded(true)
    }
    const ranked = () =>
      rankEndpoints(endpoints.map((endpoint): EndpointHealth => ({ ...endpoint, degraded: isDegraded(endpoint) }))).map(
        (i) => endpoints[i]!
      )

    /** `eth_chainId` of one endpoint. */
    const chainOf = (endpoint: Endpoint, timeoutMs: number) =>
      Effect.tryPromise({
        try: (signal) => endpoint.own.request<Hex>("eth_chainId", [], signal, timeoutMs),
        catch: messageOf
      }).pipe(
        Effect.match({
          onSuccess: (answer): EndpointChain => ({ _tag: "Answered", chainId: hexToNumber(answer) }),
          onFailure: (error): EndpointChain => ({ _tag: "Unanswered", error })
        })
      )

    const atStart = yield* Effect.forEach(endpoints, (endpoint) => chainOf(endpoint, options.readTimeoutMs), {
      concurrency: "unbounded"
    })
    yield* checkEndpointChains(
      options.chainId,
      endpoints.map((endpoint, i) => ({ host: endpoint.host, answer: atStart[i]! }))
    )
    for (const [i, endpoint] of endpoints.entries()) {
      const answer = atStart[i]!
      setStatus(endpoint, answer._tag === "Answered" ? "up" : "unchecked")
      endpoint.metrics.degraded(false)
      endpoint.logged = endpoint.status
      if (answer._tag === "Unanswered") {
        yield* Effect.logWarning(
          `chain endpoint ${endpoint.position} (${endpoint.host}) did not answer at start: not used until it answers on chain ${options.chainId}`
        )
      }
    }

    /** One probe of one endpoint: its chain id while unchecked, else the block number, timed. */
    const probe = (endpoint: Endpoint) =>
      Effect.gen(function* () {
        if (endpoint.status === "wrong-chain") return
        if (endpoint.status === "unchecked") {
          const answer = yield* chainOf(endpoint, probeTimeoutMs)
          if (answer._tag === "Unanswered") return
          const onChain = answer.chainId === options.chainId
          setStatus(endpoint, onChain ? "up" : "wrong-chain")
          if (!onChain) {
            yield* Effect.logError(
              `chain endpoint ${endpoint.position} (${endpoint.host}) is on chain ${answer.chainId}, not CHAIN_ID ${options.chainId}: never used; remove it from CHAIN_RPC_URL`
            )
            endpoint.logged = "wrong-chain"
          }
          return
        }
        const started = Date.now()
        const failure = yield* Effect.tryPromise({
          try: (signal) => endpoint.own.request<Hex>("eth_blockNumber", [], signal, probeTimeoutMs),
          catch: (error) => error
        }).pipe(Effect.match({ onSuccess: () => undefined, onFailure: (error) => error }))
        const ok = failure === undefined
        endpoint.probes = [...endpoint.probes, { answered: ok, ms: Date.now() - started }].slice(-PROBES_KEPT)
        const latency = meanLatency(endpoint.probes)
        if (latency !== undefined) endpoint.metrics.latency(latency)
        // An endpoint's own error is an answer: it is up, degraded; the probe does not end a degradation.
        if (failure instanceof RpcEndpointFault) faulted(endpoint, failure)
        else setStatus(endpoint, ok ? "up" : "down")
      })

    /** Logs an endpoint's degradation and its end once each (a backoff that passed ends it here). */
    const logDegradation = (endpoint: Endpoint) => {
      const degraded = isDegraded(endpoint)
      if (degraded === endpoint.loggedDegraded) return Effect.void
      endpoint.loggedDegraded = degraded
      endpoint.metrics.degraded(degraded)
      const name = `chain endpoint ${endpoint.position} (${endpoint.host})`
      return degraded
        ? Effect.logWarning(
            `${name} is degraded (${endpoint.degradedBy}): reads go to the other endpoints first for ${endpoint.degradedUntil - Date.now()} ms`
          )
        : Effect.logInfo(`${name} is no longer degraded: in use again`)
    }

    /** Logs an endpoint's change of status since the last round. */
    const logStatus = (endpoint: Endpoint) => {
      if (endpoint.status === endpoint.logged) return Effect.void
      const previous = endpoint.logged
      endpoint.logged = endpoint.status
      const name = `chain endpoint ${endpoint.position} (${endpoint.host})`
      return endpoint.status === "down"
        ? Effect.logWarning(`${name} is down: not answering; reads go to the other endpoints`)
        : endpoint.status === "up"
          ? Effect.logInfo(
              previous === "unchecked"
                ? `${name} answers on chain ${options.chainId}: in use`
                : `${name} is back: in use again`
            )
          : Effect.void
    }

    /** Logs each endpoint's change of state since the last round (a call may have marked it down meanwhile). */
    const logChanges = Effect.forEach(endpoints, (endpoint) =>
      Effect.zipRight(
        logStatus(endpoint),
        Effect.suspend(() => logDegradation(endpoint))
      )
    )

    if (!single) {
      yield* Effect.forkScoped(
        Effect.forever(
          wallClockPause(options.probeIntervalMs).pipe(
            Effect.zipRight(Effect.forEach(endpoints, probe, { concurrency: "unbounded", discard: true })),
            Effect.zipRight(logChanges)
          )
        )
      )
    }

    const client = (clientOptions: JsonRpcOptions): JsonRpc => {
      const clients = endpoints.map((endpoint) =>
        jsonRpcClient(endpoint.url, {
          timeoutMs: clientOptions.timeoutMs,
          retryUnanswered: single && clientOptions.retryUnanswered
        })
      )
      opened.push(...clients)
      const clientOf = (endpoint: Endpoint) => clients[endpoint.position - 1]!

      /**
       * The best endpoint first; while it has not answered after the hedge delay (a share of the
       * bound: a third with two endpoints) the next is asked too, and so on. The first answer wins
       * and the calls still running are abandoned: an endpoint slower than the hedge delay is seen
       * down until a probe finds it answering. An endpoint that does not answer (refused, cut)
       * hands over at once.
       */
      const read = <A>(
        method: string,
        params: ReadonlyArray<unknown>,
        signal: AbortSignal | undefined,
        timeoutMs: number
      ) =>
        new Promise<A>((resolve, reject) => {
          const deadline = Date.now() + timeoutMs
          const order = ranked()
          const hedgeMs = Math.max(1, Math.floor(timeoutMs / (order.length + 1)))
          /**
           * The calls still running: when each started, and how to abandon it (none for an endpoint
           * alone: its call takes the caller's signal, there is no other call to abandon it for).
           */
          const running = new Map<Endpoint, { readonly started: number; readonly abandon?: AbortController }>()
          let next = 0
          // Made when needed: an error's stack is captured where it is made, on every read otherwise.
          let lastError: unknown
          const failure = () => lastError ?? new RpcUnreachable(`no endpoint of the chain in use (${timeoutMs} ms)`)
          let hedge: ReturnType<typeof setTimeout> | undefined
          let settled = false
          const settle = (finish: () => void) => {
            settled = true
            clearTimeout(hedge)
            signal?.removeEventListener("abort", onAbort)
            for (const [slow, { started, abandon }] of running) {
              if (Date.now() - started >= hedgeMs) unreachable(slow)
              abandon?.abort()
            }
            finish()
          }
          const onAbort = () => settle(() => reject(failure()))
          if (signal?.aborted === true) return reject(failure())
          signal?.addEventListener("abort", onAbort)
          const launch = () => {
            clearTimeout(hedge)
            const remaining = deadline - Date.now()
            if (settled) return
            if (next >= order.length || remaining <= 0) {
              if (running.size === 0) settle(() => reject(failure()))
              return
            }
            const endpoint = order[next++]!
            if (next > 1) endpoint.metrics.failover()
            const abandon = order.length > 1 ? new AbortController() : undefined
            running.set(endpoint, { started: Date.now(), ...(abandon === undefined ? {} : { abandon }) })
            clientOf(endpoint)
              .request<A>(method, params, abandon?.signal ?? signal, remaining)
              .then(
                (answer) => {
                  if (settled) return
                  running.delete(endpoint)
                  answered(endpoint)
                  settle(() => resolve(answer))
                },
                (error: unknown) => {
                  if (settled) return
                  running.delete(endpoint)
                  if (!(error instanceof RpcUnreachable)) {
                    answered(endpoint)
                    return settle(() => reject(error))
                  }
                  if (error instanceof RpcEndpointFault) faulted(endpoint, error)
                  else unreachable(endpoint)
                  lastError = error
                  launch()
                }
              )
            if (next < order.length) hedge = setTimeout(launch, hedgeMs)
          }
          launch()
        })

      /** One endpoint's answer to a broadcast: a node that says it has the transaction is asked for it by hash. */
      const broadcastTo = async (
        endpoint: Endpoint,
        raw: Hex,
        signal: AbortSignal | undefined,
        timeoutMs: number
      ): Promise<BroadcastAnswer> => {
        try {
          const hash = await clientOf(endpoint).request<Hash>("eth_sendRawTransaction", [raw], signal, timeoutMs)
          answered(endpoint)
          return { _tag: "Accepted", hash }
        } catch (error) {
          if (error instanceof RpcUnreachable) {
            if (error instanceof RpcEndpointFault) faulted(endpoint, error)
            else unreachable(endpoint)
            return { _tag: "Unreachable", error }
          }
          answered(endpoint)
          if (error instanceof RpcRequestError && alreadyHas.test(error.details)) {
            const hash = keccak256(raw)
            const known = await endpoint.own
              .request<unknown>("eth_getTransactionByHash", [hash], signal, timeoutMs)
              .catch(() => null)
            if (known !== null) return { _tag: "Accepted", hash }
          }
          return { _tag: "Refused", error }
        }
      }

      /** To every endpoint in use (every checked one when none is): the first acceptance, else the first refusal. */
      const broadcast = (raw: Hex, signal: AbortSignal | undefined, timeoutMs: number) =>
        new Promise<Hash>((resolve, reject) => {
          const order = ranked()
          const inUse = order.filter((endpoint) => endpoint.status === "up")
          const targets = inUse.length > 0 ? inUse : order
          if (targets.length === 0) return reject(new RpcUnreachable("no endpoint of the chain in use"))
          const answers: Array<BroadcastAnswer | undefined> = targets.map(() => undefined)
          let waiting = targets.length
          let settled = false
          for (const [i, endpoint] of targets.entries()) {
            void broadcastTo(endpoint, raw, signal, timeoutMs).then((answer) => {
              answers[i] = answer
              waiting--
              if (settled) return
              if (answer._tag === "Accepted") {
                settled = true
                return resolve(answer.hash)
              }
              if (waiting > 0) return
              settled = true
              const refused = answers.find((a) => a?._tag === "Refused") ?? answers[0]!
              reject((refused as { readonly error: unknown }).error)
            })
          }
        })

      return {
        request: <A>(method: string, params: ReadonlyArray<unknown>, signal?: AbortSignal, timeoutMs?: number) => {
          const bound = Math.min(timeoutMs ?? clientOptions.timeoutMs, clientOptions.timeoutMs)
          return method === "eth_sendRawTransaction"
            ? (broadcast(params[0] as Hex, signal, bound) as Promise<A>)
            : read<A>(method, params, signal, bound)
        },
        close: () => {
          for (const rpc of clients) rpc.close()
        }
      }
    }

    return {
      client,
      states: () =>
        endpoints.map((endpoint) => ({
          endpoint: endpoint.position,
          state: endpoint.status,
          latencyMs: meanLatency(endpoint.probes),
          degraded: isDegraded(endpoint) ? endpoint.degradedBy : undefined
        }))
    }
  })
