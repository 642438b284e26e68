import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { classifyRpcError, type FailedCall, retryAfterMs } from "../../src/chain/RpcErrorClass.js"

const NOW = Date.UTC(2026, 10, 28, 12, 0, 0)
const httpStatus = FastCheck.constantFrom(200, 400, 429, 500, 502, 503)
const retryAfter = FastCheck.option(FastCheck.integer({ min: 0, max: 3_600 }).map(String), { nil: undefined })
/** Words no classification rule looks for. */
const plainMessage = FastCheck.constantFrom("boom", "invalid argument 0", "something happened", "")
const revertData = FastCheck.uint8Array({ minLength: 4, maxLength: 68 }).map(
  (bytes) => `0x${Buffer.from(bytes).toString("hex")}`
)
const anyCode = FastCheck.integer({ min: -32_768, max: 32_767 })
const anyMessage = FastCheck.oneof(
  plainMessage,
  FastCheck.string().filter((text) => !/time/i.test(text)),
  FastCheck.constantFrom("rate limit exceeded", "Method not found")
)

/** An execution code drawn by `anyCode` is the chain's answer, the first property's case. */
const assumeNotExecution = (code: number) => FastCheck.pre(code !== 3 && code !== -32015)

const failed = (call: Partial<FailedCall> & Pick<FailedCall, "error">): FailedCall => ({
  httpStatus: 200,
  retryAfter: undefined,
  now: NOW,
  ...call
})
const faultOf = (call: FailedCall) => {
  const verdict = classifyRpcError(call)
  return verdict._tag === "EndpointFault" ? verdict.reason : "chain"
}

describe("a failed JSON-RPC call: the endpoint's fault or the chain's answer", () => {
  it.prop(
    "an execution error (code 3, -32015, or revert data) is the chain's answer whatever else the endpoint says",
    [httpStatus, retryAfter, anyMessage, FastCheck.oneof(FastCheck.constantFrom(3, -32015), anyCode), revertData],
    ([status, after, message, code, data]) => {
      const withData = failed({ httpStatus: status, retryAfter: after, error: { code, message, data } })
      expect(classifyRpcError(withData)).toEqual({ _tag: "ChainAnswer" })
      const byCode = failed({ httpStatus: status, error: { code: code === 3 ? 3 : -32015, message } })
      expect(classifyRpcError(byCode)).toEqual({ _tag: "ChainAnswer" })
    }
  )

  it.prop(
    "HTTP 429, code -32005 or 429, or the words of a rate limit: rate-limited, with Retry-After's seconds",
    [
      FastCheck.oneof(
        FastCheck.record({ status: FastCheck.constant(429), code: anyCode, message: plainMessage }),
        FastCheck.record({ status: httpStatus, code: FastCheck.constantFrom(-32005, 429), message: plainMessage }),
        FastCheck.record({
          status: httpStatus,
          code: FastCheck.constantFrom(-32000, -32603, -32007, -32090),
          message: FastCheck.constantFrom(
            "rate limit exceeded",
            "daily request count exceeded, request rate limited",
            "Your app has exceeded its compute units per second capacity",
            "15/second request limit reached",
            "Too Many Requests"
          )
        })
      ),
      retryAfter
    ],
    ([{ status, code, message }, after]) => {
      assumeNotExecution(code)
      expect(classifyRpcError(failed({ httpStatus: status, retryAfter: after, error: { code, message } }))).toEqual({
        _tag: "EndpointFault",
        reason: "rate-limited",
        retryAfterMs: after === undefined ? undefined : Number(after) * 1000
      })
    }
  )

  it.prop(
    "an internal error (-32603), an HTTP 5xx, or -32000 about the node's own state: a server error",
    [
      FastCheck.oneof(
        FastCheck.record({ status: httpStatus, code: FastCheck.constant(-32603), message: plainMessage }),
        FastCheck.record({
          status: FastCheck.constantFrom(500, 502, 503),
          code: FastCheck.constantFrom(-32000, -32700, -1),
          message: plainMessage
        }),
        FastCheck.record({
          status: httpStatus.filter((status) => status !== 429),
          code: FastCheck.constant(-32000),
          message: FastCheck.constantFrom("header not found", "missing trie node 4a2b (path )", "request timed out")
        })
      )
    ],
    ([{ status, code, message }]) => {
      expect(faultOf(failed({ httpStatus: status, error: { code, message } }))).toBe(
        status === 429 ? "rate-limited" : "server-error"
      )
    }
  )

  it.prop(
    "a method the node lacks (-32601, -32004, or its words): method-unavailable",
    [
      FastCheck.oneof(
        FastCheck.record({ code: FastCheck.constantFrom(-32601, -32004), message: plainMessage }),
        FastCheck.record({
          code: FastCheck.constantFrom(-32000, -32601),
          message: FastCheck.constantFrom(
            "the method eth_getBlockReceipts does not exist/is not available",
            "Method not found",
            "unsupported method"
          )
        })
      )
    ],
    ([error]) => {
      expect(faultOf(failed({ error }))).toBe("method-unavailable")
    }
  )

  it("-32015 naming a timeout is a node's (Goldsky's Edge RPC), otherwise a VM execution error", () => {
    expect(faultOf(failed({ error: { code: -32015, message: "upstream node timed out" } }))).toBe("server-error")
    expect(faultOf(failed({ error: { code: -32015, message: "VM execution error." } }))).toBe("chain")
  })

  it.prop("no JSON-RPC error (an HTTP error page, a broken body) is never the chain's answer", [httpStatus], ([s]) => {
    expect(faultOf(failed({ httpStatus: s, error: undefined }))).toBe(s === 429 ? "rate-limited" : "server-error")
  })

  it.prop(
    "the node's verdict on a transaction or a call over HTTP 200 stays the chain's answer",
    [
      FastCheck.constantFrom(
        "nonce too low",
        "already known",
        "replacement transaction underpriced",
        "insufficient funds for gas * price + value",
        "max fee per gas less than block base fee",
        "execution reverted",
        "boom"
      ),
      FastCheck.constantFrom(-32000, -32003, -32010, -32602, -32002)
    ],
    ([message, code]) => {
      expect(classifyRpcError(failed({ error: { code, message } }))).toEqual({ _tag: "ChainAnswer" })
    }
  )

  it.prop(
    "Retry-After as an HTTP date is the time left until then, never negative",
    [FastCheck.integer({ min: -3_600, max: 3_600 })],
    ([seconds]) => {
      const date = new Date(NOW + seconds * 1000).toUTCString()
      expect(retryAfterMs(date, NOW)).toBe(Math.max(0, seconds * 1000))
    }
  )

  it("an unreadable Retry-After is ignored", () => {
    expect(retryAfterMs("soon", NOW)).toBeUndefined()
    expect(retryAfterMs(undefined, NOW)).toBeUndefined()
  })
})
