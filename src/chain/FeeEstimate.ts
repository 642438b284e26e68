/**
 * The fees transactions are signed with: the node's estimate, kept a few seconds (one read at a
 * time), forgotten when a block's base fee outruns it or a node refuses it, capped by MAX_FEE_PER_GAS.
 */
import { Effect, type Option } from "effect"
import { type Chain, Eip1559FeesNotSupportedError, type PublicClient, type Transport } from "viem"
import type { ChainError } from "./ChainClient.js"
import { cappedFees, type Fees } from "./FeeBump.js"
import { chainCall } from "./NodeErrors.js"

/**
 * How long fee estimates are reused. Signed fees allow twice the base fee seen: a rise beyond that
 * within this time gets the transaction refused, and it is signed again with fresh fees.
 */
const FEES_REUSED_MS = 5_000
export const BASE_FEE_MULTIPLIER = 2

export const maxFeeOf = (fee: Fees) => ("gasPrice" in fee ? fee.gasPrice : fee.maxFeePerGas)

export interface FeeEstimate {
  /** The node's fee estimate: EIP-1559 (twice the base fee, plus the node's tip), or a gas price. */
  readonly estimated: Effect.Effect<Fees, ChainError>
  /** Fees to sign with: the estimate, within MAX_FEE_PER_GAS. */
  readonly current: Effect.Effect<Fees, ChainError>
  /** The next signature reads the estimate anew (a refused fee, a fee bump). */
  readonly forget: () => void
  /**
   * A block whose base fee the kept estimate no longer covers (a fee spike): the estimate is read
   * anew for the next signature, instead of sends being refused as underpriced until it expires.
   */
  readonly forgetOutrunBy: (baseFee: bigint | undefined) => Effect.Effect<void>
}

export const feeEstimate = (
  publicClient: PublicClient<Transport, Chain>,
  chain: Chain,
  cap: Option.Option<bigint>
): FeeEstimate => {
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
  const estimated = Effect.suspend(
    () => freshFees() ?? feesRead.withPermits(1)(Effect.suspend(() => freshFees() ?? readFees))
  )

  return {
    estimated,
    current: Effect.map(estimated, (estimate) => cappedFees(estimate, cap)),
    forget: () => {
      fees = undefined
    },
    forgetOutrunBy: (baseFee) =>
      Effect.sync(() => {
        if (fees === undefined || baseFee === undefined) return
        const room =
          "gasPrice" in fees.value ? fees.value.gasPrice : fees.value.maxFeePerGas - fees.value.maxPriorityFeePerGas
        if (baseFee > room) fees = undefined
      })
  }
}
