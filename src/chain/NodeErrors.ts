/**
 * What a node (or viem) said when a call failed, as one line: its own words, a revert's reason,
 * the name of one of our contracts' custom errors. Every chain call's failure goes through here.
 */
import { Effect } from "effect"
import {
  type Abi,
  BaseError,
  ContractFunctionRevertedError,
  ContractFunctionZeroDataError,
  decodeErrorResult,
  type Hex,
  RpcRequestError
} from "viem"
import { ChainError } from "./ChainClient.js"
import { DemoExchangeArtifact, StockTokenArtifact, Usd1Artifact } from "./contracts/artifacts.js"
import type { JsonRpc } from "./JsonRpc.js"

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
export const decodedRevert = (data: Hex): string | undefined => {
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
export const revertReason = (cause: unknown): string => {
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

export const chainCall = <A>(what: string, f: (signal: AbortSignal) => Promise<A>) =>
  Effect.tryPromise({ try: f, catch: (cause) => new ChainError({ message: `${what}: ${errorText(cause)}`, cause }) })

/** One JSON-RPC read (bounded, retried once when unanswered). */
export type Read = <A>(what: string, method: string, params: ReadonlyArray<unknown>) => Effect.Effect<A, ChainError>

/** Reads over `rpc`, a failure named by `what`. */
export const readsOver =
  (rpc: JsonRpc): Read =>
  <A>(what: string, method: string, params: ReadonlyArray<unknown>) =>
    chainCall(what, (signal) => rpc.request<A>(method, params, signal))

/**
 * A call to a function the contract does not have reverts without any data (or, on an account
 * without code, returns nothing). For `paused()` that means "no pause flag", not a failed read.
 */
export const isMissingFunction = (cause: unknown) =>
  cause instanceof BaseError &&
  cause.walk(
    (e) =>
      e instanceof ContractFunctionZeroDataError ||
      (e instanceof ContractFunctionRevertedError &&
        e.data === undefined &&
        e.signature === undefined &&
        (e.reason === undefined || e.reason === "execution reverted"))
  ) !== null
