/**
 * x402 v2 wire format for the `exact` scheme on EVM with EIP-3009: pure schemas, header codecs,
 * the requirements we offer and the off-chain checks in the reference facilitator's order.
 * No I/O here; chain reads (nonce state, balance) and the signature check live in the service.
 */
import { Either, Option, Schema } from "effect"
import { getAddress } from "viem"
import { ADDRESS_PATTERN, type Address } from "../chain/Address.js"
import type { TransferAuthorization } from "../chain/ChainClient.js"
import { jsonDeeperThan, MAX_JSON_DEPTH, unstorableText } from "../http/RequestBody.js"
import { parseHttpUrl } from "../runtime/HttpUrl.js"

const X402_VERSION = 2
/** Seconds a signed authorization must still be valid for when it reaches us (block time). */
const VALID_BEFORE_BUFFER_SECONDS = 6
/**
 * How far the payer's clock may run ahead of ours: a standard client signs `validBefore = its now +
 * maxTimeoutSeconds`, so we accept at most our now + maxTimeoutSeconds + this.
 */
export const CLOCK_SKEW_SECONDS = 30
/** The decoded PAYMENT-SIGNATURE may not exceed this (a 6492 smart-wallet signature fits). */
const MAX_PAYMENT_HEADER_BYTES = 16 * 1024

/** Reason strings of the reference implementation, so standard clients understand them. */
export const Reason = {
  paymentRequired: "Payment required",
  invalidPayload: "invalid_payload",
  noMatchingRequirements: "No matching payment requirements",
  invalidScheme: "invalid_exact_evm_scheme",
  networkMismatch: "invalid_exact_evm_network_mismatch",
  signature: "invalid_exact_evm_signature",
  /** An ERC-6492 signature of a smart account not deployed yet (x402 2.10's reason): deploy it, then pay. */
  undeployedSmartWallet: "invalid_exact_evm_payload_undeployed_smart_wallet",
  recipientMismatch: "invalid_exact_evm_recipient_mismatch",
  validBefore: "invalid_exact_evm_payload_authorization_valid_before",
  validAfter: "invalid_exact_evm_payload_authorization_valid_after",
  valueMismatch: "invalid_exact_evm_payload_authorization_value_mismatch",
  nonceUsed: "invalid_exact_evm_nonce_already_used",
  insufficientBalance: "invalid_exact_evm_insufficient_balance",
  simulationFailed: "invalid_exact_evm_transaction_simulation_failed",
  transactionFailed: "invalid_exact_evm_transaction_failed",
  transferEventMismatch: "invalid_exact_evm_transfer_event_mismatch",
  unexpectedSettleError: "unexpected_settle_error",
  /**
   * Ours: the settlement's transaction was mined, then lost by the chain (a reorg, a node restored
   * from an older state), and its authorization expired before it could be mined again.
   */
  transactionLost: "transaction_lost_authorization_expired",
  /** Ours (x402 names none): the payload's `resource` is not this order's pay URL. */
  resourceMismatch: "resource_mismatch: the payment was made for another resource than this order's pay URL",
  /** Ours: x402 makes `resource` optional, we bind a payment to its order by it (the standard client echoes it). */
  resourceMissing:
    "resource_missing: the payment names no resource: send the 402's resource with it, as x402 v2 clients do",
  /** Ours, after the reference reason: an authorization valid for longer than the offer allows. */
  validBeforeTooLate: "invalid_exact_evm_payload_authorization_valid_before: later than maxTimeoutSeconds from now"
} as const

const MAX_UINT256 = 2n ** 256n - 1n
/** A uint256 in decimal, as EIP-3009 amounts, times and x402 amounts are. */
const DecimalInteger = Schema.String.pipe(
  Schema.pattern(/^\d{1,78}$/),
  Schema.filter((text) => BigInt(text) <= MAX_UINT256 || "must fit in 256 bits")
)
const HexAddress = Schema.String.pipe(Schema.pattern(ADDRESS_PATTERN))

export const ResourceInfo = Schema.Struct({
  url: Schema.String,
  description: Schema.optional(Schema.String),
  mimeType: Schema.optional(Schema.String)
}).annotations({ identifier: "X402ResourceInfo" })
export type ResourceInfo = typeof ResourceInfo.Type

export const PaymentRequirements = Schema.Struct({
  scheme: Schema.String,
  network: Schema.String,
  amount: DecimalInteger,
  asset: Schema.String,
  payTo: Schema.String,
  maxTimeoutSeconds: Schema.Number,
  extra: Schema.Record({ key: Schema.String, value: Schema.Unknown })
}).annotations({ identifier: "X402PaymentRequirements" })
export type PaymentRequirements = typeof PaymentRequirements.Type

export const PaymentRequiredBody = Schema.Struct({
  x402Version: Schema.Literal(X402_VERSION),
  error: Schema.String,
  resource: ResourceInfo,
  accepts: Schema.Array(PaymentRequirements)
})
export type PaymentRequiredBody = typeof PaymentRequiredBody.Type

export const Authorization = Schema.Struct({
  from: HexAddress,
  to: HexAddress,
  value: DecimalInteger,
  validAfter: DecimalInteger,
  validBefore: DecimalInteger,
  nonce: Schema.String.pipe(Schema.pattern(/^0x[0-9a-fA-F]{64}$/))
})
export type Authorization = typeof Authorization.Type

export const PaymentPayload = Schema.Struct({
  x402Version: Schema.Literal(X402_VERSION),
  resource: Schema.optional(ResourceInfo),
  accepted: PaymentRequirements,
  payload: Schema.Struct({
    signature: Schema.String.pipe(Schema.pattern(/^0x([0-9a-fA-F]{2})+$/)),
    authorization: Authorization
  }),
  extensions: Schema.optional(Schema.Record({ key: Schema.String, value: Schema.Unknown }))
})
export type PaymentPayload = typeof PaymentPayload.Type

export const SettleResponse = Schema.Struct({
  success: Schema.Boolean,
  transaction: Schema.String,
  network: Schema.String,
  payer: Schema.optional(Schema.String),
  errorReason: Schema.optional(Schema.String)
})
export type SettleResponse = typeof SettleResponse.Type

const STANDARD_BASE64 = /^[A-Za-z0-9+/]*={0,2}$/

/** Standard base64 (not base64url) of the UTF-8 JSON text, as every x402 header carries. */
export const encodeHeader = (value: unknown): string => Buffer.from(JSON.stringify(value), "utf8").toString("base64")

/**
 * Decodes a PAYMENT-SIGNATURE value; Left carries the reason for the 402. Text the payment would be
 * stored with must be storable (no U+0000, no unpaired surrogate, anywhere in the payload: the
 * reason names the field), and the JSON no deeper than request bodies may be.
 */
export const decodePaymentHeader = (header: string): Either.Either<PaymentPayload, string> => {
  if (header.length > (MAX_PAYMENT_HEADER_BYTES * 4) / 3 + 4 || !STANDARD_BASE64.test(header)) {
    return Either.left(Reason.invalidPayload)
  }
  const text = Buffer.from(header, "base64").toString("utf8")
  if (jsonDeeperThan(text, MAX_JSON_DEPTH)) return Either.left(Reason.invalidPayload)
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return Either.left(Reason.invalidPayload)
  }
  const unstorable = unstorableText(json)
  if (Option.isSome(unstorable)) return Either.left(`${Reason.invalidPayload}: ${unstorable.value}`)
  return Schema.decodeUnknownEither(PaymentPayload)(json).pipe(Either.mapLeft(() => Reason.invalidPayload))
}

export interface Offer {
  readonly chainId: number
  readonly asset: Address
  readonly payTo: Address
  readonly amountAtomic: bigint
  readonly maxTimeoutSeconds: number
  readonly domain: { readonly name: string; readonly version: string }
}

export const requirementsFor = (offer: Offer): PaymentRequirements => ({
  scheme: "exact",
  network: `eip155:${offer.chainId}`,
  amount: offer.amountAtomic.toString(),
  asset: offer.asset,
  payTo: offer.payTo,
  maxTimeoutSeconds: offer.maxTimeoutSeconds,
  extra: { name: offer.domain.name, version: offer.domain.version }
})

export const paymentRequired = (
  error: string,
  resource: ResourceInfo,
  requirements: PaymentRequirements
): PaymentRequiredBody => ({ x402Version: X402_VERSION, error, resource, accepts: [requirements] })

const sameAddress = (a: string, b: string) => {
  try {
    return getAddress(a) === getAddress(b)
  } catch {
    return false
  }
}

/**
 * The echoed `accepted` must be what we offered: equal core fields and our `extra` a subset of
 * theirs. Addresses compare by value, not letter case.
 */
export const matchesOffer = (accepted: PaymentRequirements, offered: PaymentRequirements): boolean =>
  accepted.scheme === offered.scheme &&
  accepted.network === offered.network &&
  accepted.amount === offered.amount &&
  sameAddress(accepted.asset, offered.asset) &&
  sameAddress(accepted.payTo, offered.payTo) &&
  accepted.maxTimeoutSeconds === offered.maxTimeoutSeconds &&
  Object.entries(offered.extra).every(([key, value]) => accepted.extra[key] === value)

/**
 * A URL as compared for a payment's `resource`: scheme and host in lower case, no default port, no
 * trailing slash, no query or fragment; none when it is not an absolute http(s) URL.
 */
const normalizedResource = (url: string): string | undefined => {
  const parsed = parseHttpUrl(url)
  if (parsed === undefined) return undefined
  // URL already lower-cases the scheme and host and drops the scheme's default port.
  return `${parsed.protocol}//${parsed.host}${parsed.pathname.replace(/\/+$/, "")}`
}

/**
 * Whether the payment names `payUrl`, its order's pay URL, once both are normalised; Left with the
 * reason when it names another resource or none. `resource` is not signed: this stops a client that
 * pays the wrong order by mistake, and the order's own amount (`orderTag`) stops a rewritten one.
 */
export const checkResource = (payload: PaymentPayload, payUrl: string): Either.Either<void, string> => {
  if (payload.resource === undefined) return Either.left(Reason.resourceMissing)
  const named = normalizedResource(payload.resource.url)
  return named !== undefined && named === normalizedResource(payUrl)
    ? Either.void
    : Either.left(Reason.resourceMismatch)
}

/**
 * Off-chain checks of the authorization against our requirements, after the signature, in the
 * reference order: recipient, time window (`validAfter <= now < validBefore - 6 s`, and beyond the
 * reference `validBefore <= now + maxTimeoutSeconds + CLOCK_SKEW_SECONDS`: a leaked payment stays
 * spendable minutes, not years), value.
 */
export const checkAuthorization = (
  authorization: Authorization,
  requirements: PaymentRequirements,
  nowSeconds: number
): Either.Either<void, string> => {
  if (!sameAddress(authorization.to, requirements.payTo)) return Either.left(Reason.recipientMismatch)
  const validBefore = BigInt(authorization.validBefore)
  if (validBefore < BigInt(nowSeconds + VALID_BEFORE_BUFFER_SECONDS)) return Either.left(Reason.validBefore)
  if (validBefore > BigInt(nowSeconds + requirements.maxTimeoutSeconds + CLOCK_SKEW_SECONDS)) {
    return Either.left(Reason.validBeforeTooLate)
  }
  if (BigInt(authorization.validAfter) > BigInt(nowSeconds)) return Either.left(Reason.validAfter)
  if (BigInt(authorization.value) !== BigInt(requirements.amount)) return Either.left(Reason.valueMismatch)
  return Either.void
}

/** The authorization as the chain reads it (integers and checksummed addresses). */
export const authorizationOf = (authorization: Authorization): TransferAuthorization => ({
  from: getAddress(authorization.from),
  to: getAddress(authorization.to),
  value: BigInt(authorization.value),
  validAfter: BigInt(authorization.validAfter),
  validBefore: BigInt(authorization.validBefore),
  nonce: authorization.nonce as `0x${string}`
})
