/** Card-payment test steps: a card holder with USD1 in the card wallet, and swipes at the sandbox network. */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts"
import { asaRequestBody } from "../../src/authorizations/LithicWire.js"
import { secretKey, sign } from "../../src/authorizations/StandardWebhooks.js"
import type { Devnet } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { cardHolder } from "./agent.js"
import { bearer, send } from "./http.js"
import { devnetRpc, TestDevnet } from "./TestChain.js"
import { eventually } from "./wait.js"

export const COFFEE = { name: "Blue Bottle", mcc: "5814", country: "USA", city: "Oakland" } as const

/** The card wallet's balance as the follower stored it, in USD1 units (none before it read it). */
export const followedUsd1 = (address: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ usd1: string }>`SELECT usd1::text FROM card_wallet_balances WHERE address = ${address}`.pipe(
      Effect.map((rows) => (rows[0] === undefined ? undefined : Number(BigInt(rows[0].usd1) / 10n ** 12n) / 1e6))
    )
  ).pipe(Effect.orDie)

/** The card wallet's balance as the follower stored it, in atomic units (none before it read it). */
export const followedAtomic = (address: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ usd1: string }>`SELECT usd1::text FROM card_wallet_balances WHERE address = ${address}`.pipe(
      Effect.map((rows) => (rows[0] === undefined ? undefined : BigInt(rows[0].usd1)))
    )
  ).pipe(Effect.orDie)

/** The holder's spending allowance, as `GET /card/allowance` answers it. */
export const allowanceOf = (token: string) =>
  Effect.map(send("GET", "/card/allowance", { headers: bearer(token) }), (response) => {
    expect(response.status, JSON.stringify(response.body)).toBe(200)
    return response.body as { state: string; capUsd: number; usedUsd: number; remainingUsd: number; tx?: string }
  })

/**
 * The holder signs a spending allowance of `capUsd` through the API, as a card app would (the typed
 * data it answers, signed with the wallet's key), and it is submitted; by default, until it is active.
 */
export const signAllowance = (
  holder: { readonly token: string; readonly account: PrivateKeyAccount },
  capUsd = 1_000,
  options: { readonly validDays?: number; readonly untilActive?: boolean } = {}
) =>
  Effect.gen(function* () {
    const requested = yield* send("POST", "/card/allowance/request", {
      headers: bearer(holder.token),
      json: { capUsd, validDays: options.validDays ?? 30 }
    })
    expect(requested.status, JSON.stringify(requested.body)).toBe(200)
    const signature = yield* Effect.promise(() => holder.account.signTypedData(requested.body.typedData))
    const submitted = yield* send("POST", "/card/allowance", { headers: bearer(holder.token), json: { signature } })
    expect(submitted.status, JSON.stringify(submitted.body)).toBe(202)
    if (options.untilActive !== false) {
      yield* eventually("the spending allowance active", allowanceOf(holder.token), (seen) => seen.state === "active")
    }
    return { typedData: requested.body.typedData, signature, submitted: submitted.body }
  })

/**
 * A card holder whose card wallet holds `usd1` USD1 on the devnet and who signed a spending
 * allowance of $1,000, once the follower has seen both.
 */
export const fundedCardHolder = (usd1: string) =>
  Effect.gen(function* () {
    // The wallet's key, kept for what a holder does on chain themselves (a revocation, a transfer out).
    const key = generatePrivateKey()
    const holder = { ...(yield* cardHolder(undefined, privateKeyToAccount(key))), key }
    const me = yield* send("GET", "/me", { headers: bearer(holder.token) })
    const card = me.body.card as { number: string; expiry: string; cvv: string }
    if (Number(usd1) > 0) {
      yield* Effect.orDie(mintUsd1(yield* TestDevnet, holder.account.address, parseUnits(usd1, 18)))
    }
    yield* eventually(
      "the card wallet's balance followed",
      followedUsd1(holder.account.address),
      (seen) => seen === Number(usd1)
    )
    yield* signAllowance(holder)
    return { ...holder, card }
  })

/** A swipe at the sandbox network's terminal. */
export const swipe = (
  card: { readonly number: string; readonly expiry: string; readonly cvv: string },
  amountUsd: string,
  merchant: { readonly name: string; readonly mcc: string; readonly country: string; readonly city?: string } = COFFEE
) =>
  send("POST", "/sandbox/card-network/authorizations", {
    json: { cardNumber: card.number, expiry: card.expiry, cvv: card.cvv, amountUsd, merchant }
  }).pipe(Effect.tap((response) => expect(response.status, JSON.stringify(response.body)).toBe(200)))

/** The sandbox network's secret in tests that sign network messages themselves. */
export const NETWORK_SECRET = "whsec_dGVzdC1zYW5kYm94LW5ldHdvcmstc2VjcmV0LTAx"

/** POSTs a network message signed as the sandbox network signs it (or with the headers given instead). */
export const postNetworkMessage = (
  body: unknown,
  options: { readonly messageId?: string; readonly at?: number; readonly headers?: Record<string, string> } = {}
) => {
  const text = JSON.stringify(body)
  const headers =
    options.headers ??
    sign(secretKey(NETWORK_SECRET)!, options.messageId ?? `msg_${randomUUID()}`, text, options.at ?? Date.now())
  return send("POST", "/card-network/messages", { text, headers: { ...headers } })
}

/** An ASA request for `cents` on the card with network token `cardToken`. */
export const asaRequest = (cardToken: string, cents: number, token: string = randomUUID()) =>
  asaRequestBody({
    token,
    card: { token: cardToken, lastFour: "0000" },
    cents,
    merchant: { name: COFFEE.name, mcc: COFFEE.mcc, city: COFFEE.city, country: COFFEE.country },
    channel: "in_person",
    created: new Date()
  })

/** The network's token of a holder's card. */
export const cardToken = (address: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ issuerRef: string }>`SELECT issuer_ref FROM cards WHERE address = ${address}`.pipe(
      Effect.map((rows) => rows[0]!.issuerRef)
    )
  ).pipe(Effect.orDie)

/** A card's authorizations as stored. */
export const storedAuthorizations = (address: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        id: string
        approved: boolean
        reason: string | null
        heldMicros: string
        clearedMicros: string
        status: string
      }>`SELECT id, approved, reason, held_micros::text, cleared_micros::text, status
       FROM card_authorizations WHERE address = ${address} ORDER BY seq`
  ).pipe(Effect.orDie)

/** Gas for an address on the devnet, straight from anvil. */
export const fundFromAnvil = (devnet: Devnet, address: string) =>
  devnetRpc(devnet, "anvil_setBalance", [address, "0xde0b6b3a7640000"])
