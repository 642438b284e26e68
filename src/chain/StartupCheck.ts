/**
 * What the service checks of its chain before it serves: each node is on the configured chain, the
 * token answers the calls payments rely on, and Multicall3 is where the payment check expects it.
 * A deployment that fails any of them would take payments it can never settle (or refuse every one
 * as a bad signature), so the start fails with one line saying which setting is wrong.
 */
import { Data, Effect } from "effect"
import { type Hex, toFunctionSelector } from "viem"
import type { Address } from "./Address.js"
import type { ChainError } from "./ChainClient.js"
import { isUnreachable } from "./JsonRpc.js"
import { MULTICALL3_ADDRESS } from "./Multicall.js"
import type { Read } from "./NodeErrors.js"

/** The chain or the token is not what the configuration says; `message` is one line. */
export class ChainMisconfigured extends Data.TaggedError("ChainMisconfigured")<{ readonly message: string }> {}

/**
 * The token functions a payment relies on, called with zero arguments where they take some: each
 * must answer at least `bytes` bytes (`version()` is a string on USDC-style tokens and a number on
 * the USD1 deployed on BNB Chain, so any answer will do).
 */
const TOKEN_CALLS: ReadonlyArray<{
  readonly signature: string
  readonly argumentWords: number
  readonly bytes: number
}> = [
  { signature: "name()", argumentWords: 0, bytes: 64 },
  { signature: "version()", argumentWords: 0, bytes: 32 },
  { signature: "DOMAIN_SEPARATOR()", argumentWords: 0, bytes: 32 },
  { signature: "authorizationState(address,bytes32)", argumentWords: 2, bytes: 32 }
]

/** A node's text on one line, cut short: it goes into the one fatal line. */
const oneLine = (text: string) => {
  const flat = text.replace(/\s+/g, " ").trim()
  return flat.length <= 200 ? flat : `${flat.slice(0, 199)}…`
}

export interface CheckedDeployment {
  readonly chainId: number
  readonly usd1: Address
}

/** What one endpoint answered to `eth_chainId` at start. */
export type EndpointChain =
  | { readonly _tag: "Answered"; readonly chainId: number }
  | { readonly _tag: "Unanswered"; readonly error: string }

/**
 * Every endpoint that answers must be on `chainId`: one on another chain would serve reads and
 * take broadcasts of another chain. At least one must answer; an endpoint that does not is left
 * unchecked (not used until it answers with the right chain id).
 */
export const checkEndpointChains = (
  chainId: number,
  endpoints: ReadonlyArray<{ readonly host: string; readonly answer: EndpointChain }>
): Effect.Effect<void, ChainMisconfigured> => {
  const single = endpoints.length === 1
  for (const [i, { host, answer }] of endpoints.entries()) {
    if (answer._tag === "Answered" && answer.chainId !== chainId) {
      return new ChainMisconfigured({
        message:
          `${single ? "CHAIN_RPC_URL" : `CHAIN_RPC_URL endpoint ${i + 1} (${host})`} is on chain ${answer.chainId}, ` +
          `not CHAIN_ID ${chainId}: point it at a node of that chain, ` +
          (single ? "or set CHAIN_ID to the chain it serves" : "or remove it")
      })
    }
  }
  const errors = endpoints.flatMap(({ answer }, i) =>
    answer._tag === "Answered" ? [] : [single ? oneLine(answer.error) : `${i + 1}: ${oneLine(answer.error)}`]
  )
  if (errors.length < endpoints.length) return Effect.void
  return new ChainMisconfigured({
    message: single
      ? `CHAIN_RPC_URL did not answer at start: ${errors[0]}`
      : `no endpoint of CHAIN_RPC_URL answered at start: ${errors.join("; ")}`
  })
}

/**
 * Checks the token's answers and Multicall3's code, all at once (each endpoint's chain id is
 * checked before: `checkEndpointChains`).
 */
export const checkChain = (deployment: CheckedDeployment, read: Read): Effect.Effect<void, ChainMisconfigured> => {
  const unanswered = (error: ChainError) =>
    new ChainMisconfigured({ message: `CHAIN_RPC_URL did not answer at start: ${oneLine(error.message)}` })

  /** The token functions that do not answer as they should, with why. */
  const silentTokenCalls = Effect.forEach(
    TOKEN_CALLS,
    ({ signature, argumentWords, bytes }) =>
      read<Hex>(signature, "eth_call", [
        { to: deployment.usd1, data: `${toFunctionSelector(signature)}${"00".repeat(32 * argumentWords)}` },
        "latest"
      ]).pipe(
        Effect.map((answer) =>
          (answer.length - 2) / 2 >= bytes
            ? []
            : [`${signature} ${answer === "0x" ? "answers nothing" : "answers too little"}`]
        ),
        // a revert is an answer of the node: the function is not there, or refuses
        Effect.catchAll((error) =>
          isUnreachable(error.cause) ? Effect.fail(unanswered(error)) : Effect.succeed([`${signature} reverts`])
        )
      ),
    { concurrency: "unbounded" }
  ).pipe(Effect.map((results) => results.flat()))

  const token = silentTokenCalls.pipe(
    Effect.flatMap((silent) =>
      silent.length === 0
        ? Effect.void
        : new ChainMisconfigured({
            message:
              `USD1_ADDRESS ${deployment.usd1} is not an EIP-3009 token on chain ${deployment.chainId}: ` +
              `${silent.join(", ")}`
          })
    )
  )

  const multicall = read<Hex>("Multicall3 code", "eth_getCode", [MULTICALL3_ADDRESS, "latest"]).pipe(
    Effect.mapError(unanswered),
    Effect.flatMap((code) =>
      code !== "0x"
        ? Effect.void
        : new ChainMisconfigured({
            message: `chain ${deployment.chainId} has no Multicall3 at ${MULTICALL3_ADDRESS}: payments are checked through it`
          })
    )
  )

  return Effect.all([token, multicall], { concurrency: 2, discard: true }).pipe(
    Effect.withSpan("ChainClient.checkChain")
  )
}
