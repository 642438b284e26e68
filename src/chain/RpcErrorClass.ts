/**
 * Whose fault a failed JSON-RPC call is (pure): the endpoint's, or the chain's answer.
 *
 * - The endpoint's fault: it limits our rate (HTTP 429, `-32005`, code `429`, "limit exceeded"),
 *   fails on its side (HTTP 5xx, `-32603`, `-32000` "header not found" or "missing trie node", a
 *   timeout it wraps as an error) or does not offer the method (`-32601`, `-32004`).
 *   Another endpoint of the same chain may well answer: the call goes there at once, and this one
 *   is skipped for a backoff (its `Retry-After` when it gives one).
 * - The chain's answer: an execution error (a revert: code `3`, `-32015` but for a timeout, or
 *   any error carrying revert data) and everything not known to be the endpoint's. Every node of the chain would say
 *   the same, so it is never asked elsewhere.
 *
 * docs/chains.md lists each provider's codes.
 */

export type EndpointFaultReason = "rate-limited" | "server-error" | "method-unavailable"

export type RpcErrorClass =
  | { readonly _tag: "EndpointFault"; readonly reason: EndpointFaultReason; readonly retryAfterMs: number | undefined }
  | { readonly _tag: "ChainAnswer" }

/** A failed call as the endpoint gave it: its HTTP status, its JSON-RPC error if any, its `Retry-After`. */
export interface FailedCall {
  readonly httpStatus: number
  readonly error: { readonly code: number; readonly message: string; readonly data?: unknown } | undefined
  /** The `Retry-After` header: seconds, or an HTTP date. */
  readonly retryAfter: string | undefined
  /** Now (ms since the epoch), to read a `Retry-After` date. */
  readonly now: number
}

/** geth's and anvil's execution error (a revert, with its data). */
const EXECUTION_REVERTED = 3
/** OpenEthereum's and Nethermind's "VM execution error" (Goldsky's Edge RPC uses it for a node timeout). */
const VM_EXECUTION_ERROR = -32015
/** EIP-1474's "limit exceeded" (Infura), `429` in the body, BlockVision's "rate limit" and "call limit". */
const RATE_LIMIT_CODES = new Set([-32005, 429, -32605, -32607])
/** JSON-RPC's "method not found", EIP-1474's "method not supported". */
const UNAVAILABLE_CODES = new Set([-32601, -32004])
const INTERNAL_ERROR = -32603
/** Words of a rate limit or a spent quota, whatever the code. */
const rateLimitWords =
  /rate.?limit|limit (exceeded|reached)|too many requests|exceeded .*(capacity|quota)|quota exceeded/i
/** A method the node does not offer, in geth's, Erigon's, Nethermind's and providers' words. */
const methodUnavailableWords =
  /method not found|method .*(does not exist|is not available|not supported)|(unsupported|unknown) method|method not (supported|available|allowed)/i
/** `-32000` ("server error") answers that are one node's state or load, not the chain's. */
const nodeTroubleWords = /header not found|missing trie node|timed? ?out|unknown block|no such block|server (is )?busy/i

/** Revert data: `0x` and at least a selector. */
const isRevertData = (data: unknown) => typeof data === "string" && /^0x[0-9a-fA-F]{8}/.test(data)

/** `Retry-After` in ms from now: delta-seconds or an HTTP date; undefined when absent or unreadable. */
export const retryAfterMs = (header: string | undefined, now: number): number | undefined => {
  if (header === undefined) return undefined
  const trimmed = header.trim()
  if (/^\d+$/.test(trimmed)) return Number(trimmed) * 1000
  const date = Date.parse(trimmed)
  return Number.isNaN(date) ? undefined : Math.max(0, date - now)
}

export const classifyRpcError = ({ httpStatus, error, retryAfter, now }: FailedCall): RpcErrorClass => {
  const fault = (reason: EndpointFaultReason): RpcErrorClass => ({
    _tag: "EndpointFault",
    reason,
    retryAfterMs: retryAfterMs(retryAfter, now)
  })
  const execution =
    error !== undefined &&
    (error.code === EXECUTION_REVERTED ||
      isRevertData(error.data) ||
      (error.code === VM_EXECUTION_ERROR && !nodeTroubleWords.test(error.message)))
  if (execution) return { _tag: "ChainAnswer" }
  if (httpStatus === 429) return fault("rate-limited")
  // No JSON-RPC error, no result: an HTTP error page or a broken body is never the chain's word.
  if (error === undefined) return fault("server-error")
  if (RATE_LIMIT_CODES.has(error.code) || rateLimitWords.test(error.message)) return fault("rate-limited")
  if (UNAVAILABLE_CODES.has(error.code) || methodUnavailableWords.test(error.message))
    return fault("method-unavailable")
  if (error.code === INTERNAL_ERROR || httpStatus >= 500) return fault("server-error")
  if ((error.code === -32000 || error.code === VM_EXECUTION_ERROR) && nodeTroubleWords.test(error.message)) {
    return fault("server-error")
  }
  return { _tag: "ChainAnswer" }
}
