/**
 * Verifies and settles x402 `exact` payments: the port and its two implementations.
 *
 * - `RelayerProcessor` (default): checks the EIP-712 signature and the chain state itself and sends
 *   `transferWithAuthorization` from our relayer. The signed transaction is recorded before it is
 *   broadcast, so a crash can always be reconciled.
 * - `FacilitatorProcessor` (`FACILITATOR_URL`): an x402 facilitator's `/verify` and `/settle`.
 *
 * Both confirm a success from the receipt: status success and the token's Transfer(from, to, value).
 */
import { HttpClient, HttpClientRequest, HttpClientResponse } from "@effect/platform"
import { Context, Data, Effect, Layer, Option, Schema } from "effect"
import { type Hash, type Hex, isErc6492Signature, parseErc6492Signature } from "viem"
import type { Address } from "../chain/Address.js"
import {
  CallReverted,
  ChainClient,
  type ChainClientShape,
  ChainError,
  type Receipt,
  type Resendable,
  receiptShowsTransfer
} from "../chain/ChainClient.js"
import { describeError } from "../observability/ErrorLine.js"
import { countRevertedSettlement } from "../observability/Metrics.js"
import { authorizationOf, type PaymentPayload, type PaymentRequirements, Reason, SettleResponse } from "./X402.js"

/**
 * The outcome of a settlement attempt. `Pending`: broadcast, not confirmed within the wait.
 * `Rejected` with `reverted`: the transaction was mined and reverted (its gas was paid for nothing).
 */
export type SettleOutcome =
  | { readonly _tag: "Settled"; readonly transaction: Hash }
  | { readonly _tag: "Rejected"; readonly reason: string; readonly transaction?: Hash; readonly reverted?: true }
  | { readonly _tag: "Pending"; readonly transaction?: Hash }

/** A settlement whose transaction was mined and reverted: nothing moved. */
export const revertedOnChain = (transaction: Hash): SettleOutcome => ({
  _tag: "Rejected",
  reason: Reason.transactionFailed,
  transaction,
  reverted: true
})

/**
 * What verification found: the reason to refuse the payment, or that it is valid now, with the
 * payer's balance when the processor read it (the reservation counts the payer's other unsettled
 * payments against it).
 */
export type Verification =
  | { readonly _tag: "Refused"; readonly reason: string }
  | { readonly _tag: "Valid"; readonly balance: Option.Option<bigint> }

/** The settlement was decided meanwhile (by the reconciler): the transaction must not go out. */
export class SettlementAbandoned extends Data.TaggedError("SettlementAbandoned") {}

export interface BroadcastRecord {
  /** The relayer key that signed it; null when a facilitator sent it. */
  readonly sender: Address | null
  readonly hash: Hash
  /** The signed transaction, kept for re-broadcast after a crash; null when a facilitator sent it. */
  readonly raw: Hex | null
  /** The relayer's nonce of it; null when a facilitator sent it. */
  readonly nonce: number | null
}

export interface PaymentProcessorShape {
  /** True when every broadcast is recorded before it happens (so no record means nothing sent). */
  readonly recordsBeforeBroadcast: boolean
  readonly verify: (
    payload: PaymentPayload,
    requirements: PaymentRequirements
  ) => Effect.Effect<Verification, ChainError>
  /**
   * Settles the payment; `record` persists each transaction before it is broadcast, and
   * `resendable` (the relayer's journal) lets a relayer that lost track of its nonce close the gap
   * first; the receipt awaited is that of whichever signed version of the transaction is mined (a
   * fee bump of a stuck one). `verifiedStillHolds`: nothing of ours that could change the
   * transfer's outcome happened since `verify` simulated it (docs/merchant.md, "The simulation
   * before signing"), so the relayer need not simulate it again before its first signature.
   */
  readonly settle: (
    payload: PaymentPayload,
    requirements: PaymentRequirements,
    record: (tx: BroadcastRecord) => Effect.Effect<void, SettlementAbandoned>,
    resendable?: Resendable,
    verifiedStillHolds?: boolean
  ) => Effect.Effect<SettleOutcome>
}

export class PaymentProcessor extends Context.Tag("app/PaymentProcessor")<PaymentProcessor, PaymentProcessorShape>() {}

const RECEIPT_WAIT_MS = 30_000

/** Maps a revert message of the token to the reference reason string; `otherwise` for the rest. */
const reasonForRevert = (message: string, otherwise: string): string => {
  if (/authorization.*(expired|valid before)/i.test(message)) return Reason.validBefore
  if (/authorization.*not.*valid/i.test(message)) return Reason.validAfter
  if (/authorization.*used/i.test(message)) return Reason.nonceUsed
  if (/exceeds.*balance|insufficient.*balance/i.test(message)) return Reason.insufficientBalance
  if (/invalid.*signature/i.test(message)) return Reason.signature
  return otherwise
}

/**
 * The signature the token checks. An ERC-6492 signature (a smart account's, wrapped with the factory
 * call that deploys it) is unwrapped: a deployed account checks the owner's signature inside it
 * through ERC-1271. An account that is not deployed cannot be charged: the token has nothing to ask.
 */
const tokenSignature = (signature: Hex): { readonly signature: Hex; readonly counterfactual: boolean } => {
  if (!isErc6492Signature(signature)) return { signature, counterfactual: false }
  try {
    return { signature: parseErc6492Signature(signature).signature, counterfactual: true }
  } catch {
    // a 6492 suffix on bytes that do not decode: the token refuses them as they are
    return { signature, counterfactual: false }
  }
}

/** A mined settlement judged: status success and the token's Transfer(from, to, value). */
const judge = (chain: ChainClientShape, receipt: Receipt, payload: PaymentPayload): SettleOutcome => {
  const { from, to, value } = authorizationOf(payload.payload.authorization)
  if (receipt.status !== "success") return revertedOnChain(receipt.hash)
  return receiptShowsTransfer(receipt, { token: chain.usd1.address, from, to, value })
    ? { _tag: "Settled", transaction: receipt.hash }
    : { _tag: "Rejected", reason: Reason.transferEventMismatch, transaction: receipt.hash }
}

/**
 * Waits for the receipt of a broadcast settlement (any of its versions) and judges it; a settlement
 * that ran out of gas (nothing moved, the authorization still unused) goes to `outOfGas` instead.
 */
const confirm = (
  chain: ChainClientShape,
  hash: Hash,
  payload: PaymentPayload,
  outOfGas: (receipt: Receipt) => Effect.Effect<SettleOutcome>
) =>
  // The block watcher answers a fee bump's receipt too (it knows which transaction each replaces).
  chain.receipt(hash, RECEIPT_WAIT_MS).pipe(
    Effect.catchAll(() => Effect.succeed(Option.none<Receipt>())),
    Effect.flatMap(
      Option.match({
        onNone: () => Effect.succeed<SettleOutcome>({ _tag: "Pending", transaction: hash }),
        onSome: (receipt) => (receipt.outOfGas ? outOfGas(receipt) : Effect.succeed(judge(chain, receipt, payload)))
      })
    )
  )

/** Verifies the payment itself and settles it from our relayer. */
export const RelayerProcessor = Layer.effect(
  PaymentProcessor,
  Effect.gen(function* () {
    const chain = yield* ChainClient

    const verify = (payload: PaymentPayload, requirements: PaymentRequirements) =>
      Effect.gen(function* () {
        const authorization = authorizationOf(payload.payload.authorization)
        const { signature, counterfactual } = tokenSignature(payload.payload.signature as Hex)
        // One read: the nonce, the balance, and the transfer simulated, which is the token's own
        // check of the signature (an EOA's or a contract wallet's) and of everything else.
        const check = yield* chain.transferCheck(authorization, signature)
        const refused = (reason: string): Verification => ({ _tag: "Refused", reason })
        if (check.used) return refused(Reason.nonceUsed)
        if (check.balance < BigInt(requirements.amount)) return refused(Reason.insufficientBalance)
        if (Option.isNone(check.refusal)) return { _tag: "Valid" as const, balance: Option.some(check.balance) }
        const reason = reasonForRevert(check.refusal.value, Reason.simulationFailed)
        // A right signature of an account not deployed yet is told apart from a wrong one (on this
        // failure path only): the payer can fix it by deploying the account.
        if (
          counterfactual &&
          reason === Reason.signature &&
          (yield* chain.authorizationSigned(authorization, payload.payload.signature as Hex))
        ) {
          return refused(Reason.undeployedSmartWallet)
        }
        return refused(reason)
      }).pipe(Effect.withSpan("PaymentProcessor.verify"))

    const settle = (
      payload: PaymentPayload,
      _requirements: PaymentRequirements,
      record: (tx: BroadcastRecord) => Effect.Effect<void, SettlementAbandoned>,
      resendable?: Resendable,
      verifiedStillHolds = false
    ) =>
      Effect.suspend(() => {
        // The transaction is broadcast only after it was recorded: no record, nothing sent.
        let recorded = false
        const relay = (outOfGasRetries: number): Effect.Effect<SettleOutcome> =>
          chain
            .transferWithAuthorization(
              authorizationOf(payload.payload.authorization),
              tokenSignature(payload.payload.signature as Hex).signature,
              (signed) =>
                record({ sender: signed.sender, hash: signed.hash, raw: signed.raw, nonce: signed.nonce }).pipe(
                  Effect.tap(() => {
                    recorded = true
                  })
                ),
              resendable,
              // only the first send: one sent again after running out of gas is simulated anew
              verifiedStillHolds && outOfGasRetries === 1
            )
            .pipe(
              // Out of gas, the transfer moved nothing and its authorization is unused: sent again
              // (recorded again) with the gas estimated anew, once.
              Effect.flatMap((signed) =>
                confirm(chain, signed.hash, payload, (receipt) =>
                  outOfGasRetries > 0
                    ? Effect.logWarning(`settlement ${receipt.hash} ran out of gas; sending it again`).pipe(
                        Effect.annotateLogs("payment.payer", authorizationOf(payload.payload.authorization).from),
                        Effect.zipRight(countRevertedSettlement),
                        Effect.zipRight(relay(outOfGasRetries - 1))
                      )
                    : Effect.succeed(judge(chain, receipt, payload))
                )
              ),
              Effect.catchAll((error): Effect.Effect<SettleOutcome> => {
                if (error instanceof CallReverted) {
                  return Effect.succeed({
                    _tag: "Rejected",
                    reason: reasonForRevert(error.reason, Reason.transactionFailed)
                  })
                }
                if (error instanceof SettlementAbandoned || !recorded) {
                  return Effect.logWarning(`settlement not sent: ${describeError(error)}`).pipe(
                    Effect.as<SettleOutcome>({ _tag: "Rejected", reason: Reason.unexpectedSettleError })
                  )
                }
                // Sent or not, we cannot tell: the reconciler decides from the chain.
                return Effect.logWarning(`settlement broadcast failed: ${describeError(error)}`).pipe(
                  Effect.as<SettleOutcome>({ _tag: "Pending" })
                )
              })
            )
        return relay(1)
      }).pipe(Effect.withSpan("PaymentProcessor.settle"))

    return { recordsBeforeBroadcast: true, verify, settle }
  })
)

const VerifyResponse = Schema.Struct({
  isValid: Schema.Boolean,
  invalidReason: Schema.optional(Schema.String)
})

/** Verify and settle through an x402 facilitator's HTTP API. */
export const FacilitatorProcessor = (baseUrl: string) =>
  Layer.effect(
    PaymentProcessor,
    Effect.gen(function* () {
      const chain = yield* ChainClient
      const http = (yield* HttpClient.HttpClient).pipe(HttpClient.filterStatus((status) => status < 500))
      const call = <A, I>(
        path: string,
        schema: Schema.Schema<A, I>,
        payload: PaymentPayload,
        requirements: PaymentRequirements
      ) =>
        http
          .execute(
            HttpClientRequest.post(`${baseUrl.replace(/\/$/, "")}${path}`).pipe(
              HttpClientRequest.bodyUnsafeJson({
                x402Version: 2,
                paymentPayload: payload,
                paymentRequirements: requirements
              })
            )
          )
          .pipe(Effect.flatMap(HttpClientResponse.schemaBodyJson(schema)), Effect.scoped, Effect.timeout("60 seconds"))

      const verify = (payload: PaymentPayload, requirements: PaymentRequirements) =>
        call("/verify", VerifyResponse, payload, requirements).pipe(
          Effect.map(
            (response): Verification =>
              // The facilitator reads the balance itself: the reservation has none to count against.
              response.isValid
                ? { _tag: "Valid", balance: Option.none() }
                : { _tag: "Refused", reason: response.invalidReason ?? Reason.signature }
          ),
          // The facilitator is this deployment's way to the chain: its failure is the chain's.
          Effect.mapError((cause) => new ChainError({ message: `facilitator /verify: ${cause.message}`, cause })),
          Effect.withSpan("PaymentProcessor.verify", { attributes: { "x402.facilitator": baseUrl } })
        )

      const settle = (
        payload: PaymentPayload,
        requirements: PaymentRequirements,
        record: (tx: BroadcastRecord) => Effect.Effect<void, SettlementAbandoned>
      ) =>
        call("/settle", SettleResponse, payload, requirements).pipe(
          Effect.flatMap((response): Effect.Effect<SettleOutcome> => {
            if (!response.success || !/^0x[0-9a-fA-F]{64}$/.test(response.transaction)) {
              return Effect.succeed({ _tag: "Rejected", reason: response.errorReason ?? Reason.transactionFailed })
            }
            const hash = response.transaction as Hash
            // Already sent by the facilitator: if the reconciler decided meanwhile, it read the chain.
            return record({ sender: null, hash, raw: null, nonce: null }).pipe(
              Effect.ignore,
              Effect.zipRight(
                confirm(chain, hash, payload, (receipt) => Effect.succeed(judge(chain, receipt, payload)))
              )
            )
          }),
          Effect.catchAll((error) =>
            Effect.logWarning("facilitator settle failed", error).pipe(Effect.as<SettleOutcome>({ _tag: "Pending" }))
          ),
          Effect.withSpan("PaymentProcessor.settle", { attributes: { "x402.facilitator": baseUrl } })
        )

      return { recordsBeforeBroadcast: false, verify, settle }
    })
  )
