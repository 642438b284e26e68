/**
 * What the service checks of its chain before it serves: the node is on the configured chain, the
 * token answers the calls payments rely on, and Multicall3 is where the payment check expects it.
 * A deployment that fails any of them would take payments it can never settle (or refuse every one
 * as a bad signature), so the start fails with one line saying which setting is wrong.
 */
import { Data, Effect } from "effect"
import { type Hex, hexToNumber, toFunctionSelector } from "viem"
import type { Address } from "./Address.js"
import type { ChainError } from "./ChainClient.js"
import { isUnreachable } from "./JsonRpc.js"
import { MULTICALL3_ADDRESS } from "./Multicall.js"

/** The chain or the token is not what the configuration says; `message` is one line. */
export class ChainMisconfigured extends Data.TaggedError("ChainMisconfigured")<{ readonly message: string }> {}

/** One JSON-RPC read (bounded, retried once when unanswered). */
type Read = <A>(what: string, method: string, params: ReadonlyArray<unknown>) => Effect.Effect<A, ChainError>

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

/** Checks the node's chain id, the token's answers and Multicall3's code, all at once. */
export const checkChain = (deployment: CheckedDeployment, read: Read): Effect.Effect<void, ChainMisconfigured> => {
  const unanswered = (error: ChainError) =>
    new ChainMisconfigured({ message: `CHAIN_RPC_URL did not answer at start: ${oneLine(error.message)}` })

  const chainId = read<Hex>("chain id", "eth_chainId", []).pipe(
    Effect.mapError(unanswered),
    Effect.flatMap((answer) =>
      hexToNumber(answer) === deployment.chainId
        ? Effect.void
        : new ChainMisconfigured({
            message:
              `CHAIN_RPC_URL is on chain ${hexToNumber(answer)}, not CHAIN_ID ${deployment.chainId}: ` +
              "point it at a node of that chain, or set CHAIN_ID to the chain it serves"
          })
    )
  )

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

  // The chain id first: on another chain the token's answers mean nothing.
  return chainId.pipe(
    Effect.zipRight(Effect.all([token, multicall], { concurrency: 2, discard: true })),
    Effect.withSpan("ChainClient.checkChain")
  )
}
