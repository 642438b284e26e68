/** Card-payment test steps: a card holder with USD1 in the card wallet, and swipes at the sandbox network. */
import { SqlClient } from "@effect/sql"
import { expect } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { cardHolder } from "./agent.js"
import { bearer, send } from "./http.js"
import { TestDevnet } from "./TestChain.js"
import { eventually } from "./wait.js"

export const COFFEE = { name: "Blue Bottle", mcc: "5814", country: "USA", city: "Oakland" } as const

/** The card wallet's balance as the follower stored it, in USD1 units (none before it read it). */
export const followedUsd1 = (address: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ usd1: string }>`SELECT usd1::text FROM card_wallet_balances WHERE address = ${address}`.pipe(
      Effect.map((rows) => (rows[0] === undefined ? undefined : Number(BigInt(rows[0].usd1) / 10n ** 12n) / 1e6))
    )
  ).pipe(Effect.orDie)

/** A card holder whose card wallet holds `usd1` USD1 on the devnet, once the follower has seen it. */
export const fundedCardHolder = (usd1: string) =>
  Effect.gen(function* () {
    const holder = yield* cardHolder()
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
