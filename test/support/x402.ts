import { randomBytes } from "node:crypto"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { type Hex, type PrivateKeyAccount, parseUnits, toHex } from "viem"
import type { Address } from "../../src/chain/Address.js"
import { ChainClient, type TransferAuthorization } from "../../src/chain/ChainClient.js"
import { transferWithAuthorizationTypedData } from "../../src/chain/Eip3009.js"
import {
  authorizationOf,
  encodeHeader,
  type PaymentPayload,
  type PaymentRequirements,
  type ResourceInfo
} from "../../src/merchant/X402.js"

export interface SignOptions {
  /** Sign with this key while claiming `from` = the payer (a forged signature). */
  readonly signer?: PrivateKeyAccount
  readonly to?: string
  readonly value?: string
  readonly validAfter?: string
  readonly validBefore?: string
  readonly nonce?: Hex
  readonly accepted?: Partial<PaymentRequirements>
  /** The resource the payment names: the offer's unless given (a standard client echoes the 402's); null: none. */
  readonly resource?: ResourceInfo | null
}

/** What a 402 offers, as a standard client reads it: the requirements to pay, and the resource they pay for. */
export interface Offer {
  readonly accepts: ReadonlyArray<PaymentRequirements>
  readonly resource: ResourceInfo
}

/** Builds and signs a PaymentPayload for the offer's first requirements as a standard client would, with overrides. */
export const signPayment = async (
  payer: PrivateKeyAccount,
  offer: Offer,
  options: SignOptions = {}
): Promise<{ payload: PaymentPayload; header: string }> => {
  const requirements = offer.accepts[0]!
  const resource = options.resource === undefined ? offer.resource : options.resource
  const chainId = Number(requirements.network.split(":")[1])
  const authorization = {
    from: payer.address,
    to: options.to ?? requirements.payTo,
    value: options.value ?? requirements.amount,
    validAfter: options.validAfter ?? "0",
    validBefore: options.validBefore ?? String(Math.floor(Date.now() / 1000) + requirements.maxTimeoutSeconds),
    nonce: options.nonce ?? (`0x${randomBytes(32).toString("hex")}` as Hex)
  }
  const typed = transferWithAuthorizationTypedData(authorizationOf(authorization), {
    chainId,
    usd1: {
      address: requirements.asset as Hex,
      decimals: 18,
      name: String(requirements.extra.name),
      version: String(requirements.extra.version)
    }
  })
  const signature = await (options.signer ?? payer).signTypedData(typed)
  const payload: PaymentPayload = {
    x402Version: 2,
    ...(resource === null ? {} : { resource }),
    accepted: { ...requirements, ...options.accepted },
    payload: { signature, authorization }
  }
  return { payload, header: encodeHeader(payload) }
}

export const decodeHeader = (value: string | undefined) =>
  value === undefined ? undefined : JSON.parse(Buffer.from(value, "base64").toString("utf8"))

/**
 * `payer`'s signed EIP-3009 authorization of `value` USD1 to `to`, valid for ten minutes, for the
 * chain the test runs on (a relayer's `transferWithAuthorization` takes it as it is).
 */
export const signedTransfer = (payer: PrivateKeyAccount, to: Address, value: bigint) =>
  Effect.gen(function* () {
    const chain = yield* ChainClient
    const authorization: TransferAuthorization = {
      from: payer.address,
      to,
      value,
      validAfter: 0n,
      validBefore: BigInt(Math.floor(Date.now() / 1000) + 600),
      nonce: toHex(randomBytes(32))
    }
    const signature = yield* Effect.promise(() =>
      payer.signTypedData(transferWithAuthorizationTypedData(authorization, chain))
    )
    return { authorization, signature }
  })

/**
 * That `atomic` USD1 is what paying `orders` orders worth `usd` in all transfers: each order asks for
 * its amount and less than a micro-dollar more, its own value (`orderTag`).
 */
export const expectWorth = (atomic: bigint, usd: string, orders = 1) => {
  const beyond = atomic - parseUnits(usd, 18)
  expect(beyond).toBeGreaterThanOrEqual(0n)
  expect(beyond).toBeLessThan(BigInt(orders) * parseUnits("0.000001", 18))
}

/** USD1 enough to pay `orders` orders worth `usd` in all: each asks for less than a micro-dollar more. */
export const enoughFor = (usd: string, orders = 1) => parseUnits(usd, 18) + BigInt(orders) * parseUnits("0.000001", 18)
