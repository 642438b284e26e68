/**
 * A JSON-RPC client over keep-alive `node:http`/`node:https` connections, each call bounded by a
 * deadline. It does not go through the global fetch dispatcher: a call costs a fraction of what
 * fetch and viem's HTTP transport cost, and its sockets are reused across calls.
 *
 * Two kinds of failure: `RpcUnreachable` (no answer: refused, reset, timed out, or an answer
 * that is the endpoint's fault and not the chain's, `RpcEndpointFault`: a rate limit, an HTTP error
 * status, a server error; the node may or may not have acted) and viem's `RpcRequestError` (the
 * chain's answer as a JSON-RPC error, e.g. a revert with its data). `RpcErrorClass.ts` tells them
 * apart.
 */
import http from "node:http"
import https from "node:https"
import { RpcRequestError } from "viem"
import { classifyRpcError, type EndpointFaultReason } from "./RpcErrorClass.js"

/** The node did not answer (or not in JSON-RPC): whether it acted on the call is unknown. */
export class RpcUnreachable extends Error {
  override readonly name: string = "RpcUnreachable"
}

/**
 * The endpoint answered, but with its own fault (rate limit, server error, method unavailable):
 * another endpoint may answer, and this one is to be left alone for `retryAfterMs` when it says.
 */
export class RpcEndpointFault extends RpcUnreachable {
  override readonly name = "RpcEndpointFault"
  constructor(
    message: string,
    readonly reason: EndpointFaultReason,
    readonly retryAfterMs: number | undefined
  ) {
    super(message)
  }
}

/** Whether `cause`, or anything it wraps, is an `RpcUnreachable`. */
export const isUnreachable = (cause: unknown): boolean => {
  for (let error = cause, depth = 0; error !== null && typeof error === "object" && depth < 16; depth++) {
    if (error instanceof RpcUnreachable) return true
    error = (error as { cause?: unknown }).cause
  }
  return false
}

export interface JsonRpcOptions {
  /** The longest a call may take, retry included. */
  readonly timeoutMs: number
  /**
   * Calls that may be repeated when the node did not answer (reads). Without it only a request
   * written to a kept-alive socket that the server had already closed is sent again: the node
   * never read it.
   */
  readonly retryUnanswered: boolean
}

export interface JsonRpc {
  /**
   * One call; `signal` abandons it (the socket is closed), `timeoutMs` bounds it tighter than the
   * client's own bound.
   */
  readonly request: <A>(
    method: string,
    params: ReadonlyArray<unknown>,
    signal?: AbortSignal,
    timeoutMs?: number
  ) => Promise<A>
  /** Closes the kept-alive sockets. */
  readonly close: () => void
}

/** Idle sockets are closed before a typical server's keep-alive timeout (5 s) closes them under us. */
const IDLE_SOCKET_MS = 4_000
const MAX_SOCKETS = 32

interface Attempt {
  readonly body: string
  readonly deadline: number
  /** The call's bound, for the message when it passes. */
  readonly bound: number
  readonly signal: AbortSignal | undefined
}

export const jsonRpcClient = (url: string, options: JsonRpcOptions): JsonRpc => {
  const target = new URL(url)
  const secure = target.protocol === "https:"
  const agent = new (secure ? https : http).Agent({
    keepAlive: true,
    maxSockets: MAX_SOCKETS,
    scheduling: "lifo",
    timeout: IDLE_SOCKET_MS
  })
  const send = secure ? https.request : http.request
  // Errors name the node by its origin only: a URL's path or credentials may carry an API key.
  const origin = target.origin
  let nextId = 1

  /** One HTTP exchange within the attempt's deadline. */
  const exchange = ({ body, deadline, bound, signal }: Attempt) =>
    new Promise<{ readonly status: number; readonly retryAfter: string | undefined; readonly text: string }>(
      (resolve, reject) => {
        const remaining = deadline - Date.now()
        if (remaining <= 0) return reject(new RpcUnreachable(`no answer from ${origin} in time`))
        const request = send(target, {
          method: "POST",
          agent,
          ...(signal === undefined ? {} : { signal }),
          headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
        })
        const timer = setTimeout(
          () => request.destroy(new RpcUnreachable(`no answer from ${origin} within ${bound} ms`)),
          remaining
        )
        request.once("response", (response) => {
          const chunks: Array<Buffer> = []
          response.on("data", (chunk: Buffer) => chunks.push(chunk))
          response.once("end", () => {
            clearTimeout(timer)
            const retryAfter = response.headers["retry-after"]
            resolve({ status: response.statusCode ?? 0, retryAfter, text: Buffer.concat(chunks).toString("utf8") })
          })
          response.once("error", (error) => {
            clearTimeout(timer)
            reject(error instanceof RpcUnreachable ? error : new RpcUnreachable(`${origin}: ${error.message}`))
          })
        })
        request.once("error", (error: Error & { code?: string }) => {
          clearTimeout(timer)
          const unreachable =
            error instanceof RpcUnreachable ? error : new RpcUnreachable(`${origin}: ${error.code ?? error.message}`)
          // A kept-alive socket the server closed meanwhile: the request never reached the node.
          Object.assign(unreachable, { staleSocket: request.reusedSocket && error.code === "ECONNRESET" })
          reject(unreachable)
        })
        request.end(body)
      }
    )

  /** One call: the node's answer, its JSON-RPC error, or `RpcUnreachable`. */
  const call = async (attempt: Attempt, payload: { readonly [key: string]: unknown }): Promise<unknown> => {
    const answer = await exchange(attempt)
    let parsed: { result?: unknown; error?: { code: number; message: string; data?: unknown } | null } | undefined
    try {
      parsed = JSON.parse(answer.text)
    } catch {
      parsed = undefined
    }
    const error = parsed?.error ?? undefined
    if (parsed !== undefined && error === undefined && answer.status === 200 && "result" in parsed) {
      return parsed.result
    }
    const verdict = classifyRpcError({
      httpStatus: answer.status,
      error,
      retryAfter: answer.retryAfter,
      now: Date.now()
    })
    // The chain's answer always has a JSON-RPC error (an answer without one is the endpoint's fault).
    if (verdict._tag === "ChainAnswer") throw new RpcRequestError({ body: payload, error: error!, url: origin })
    const words =
      error === undefined
        ? `HTTP ${answer.status} without ${parsed === undefined ? "JSON-RPC" : "a result"}`
        : `HTTP ${answer.status}, error ${error.code} "${error.message}"`
    throw new RpcEndpointFault(`${origin} answered ${words} (${verdict.reason})`, verdict.reason, verdict.retryAfterMs)
  }

  const request = async <A>(
    method: string,
    params: ReadonlyArray<unknown>,
    signal?: AbortSignal,
    timeoutMs = options.timeoutMs
  ): Promise<A> => {
    const payload = { jsonrpc: "2.0", id: nextId++, method, params }
    const bound = Math.min(timeoutMs, options.timeoutMs)
    const attempt: Attempt = { body: JSON.stringify(payload), deadline: Date.now() + bound, bound, signal }
    try {
      return (await call(attempt, payload)) as A
    } catch (error) {
      const stale = (error as { staleSocket?: boolean }).staleSocket === true
      if (!(error instanceof RpcUnreachable) || !(stale || options.retryUnanswered) || signal?.aborted) throw error
      return (await call(attempt, payload)) as A
    }
  }

  return { request, close: () => agent.destroy() }
}
