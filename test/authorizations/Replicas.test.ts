/**
 * Holds across replicas: the real service as two processes over one database and one devnet. 100
 * concurrent $1 swipes against a card with $10, half through each replica's sandbox network (each
 * delivers to its own replica's /card-network/messages), approve exactly 10.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { COFFEE, fundFromAnvil } from "../support/cards.js"
import { callService, devnetServiceEnv, sandboxCardHolder, startService, stopService } from "../support/process.js"
import { devnetWithDatabase } from "../support/TestChain.js"
import { queryDatabase } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const PROGRAM_KEY = "0x5c0a8d9e7f6b5a4c3d2e1f0a9b8c7d6e5f4a3b2c1d0e9f8a7b6c5d4e3f2a1b0c"

describe("card authorizations across replicas", () => {
  it.scopedLive("100 concurrent $1 authorizations against $10 on two replicas approve exactly 10", () =>
    Effect.gen(function* () {
      const { devnet, databaseUrl } = yield* devnetWithDatabase
      const shared = {
        CARD_SANDBOX_SECRET: "whsec_c2FuZGJveC1uZXR3b3JrLXJlcGxpY2EtdGVzdA==",
        CARD_DATA_KEY: "3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f10",
        // Every replica is the same card program: one settlement account.
        CARD_PROGRAM_KEY: PROGRAM_KEY,
        KYC_SANDBOX_SECRET: "card-replicas-sandbox-secret",
        RATE_LIMIT_CARD_SANDBOX: "100000",
        // The swipes queue on one card's lock: well within the budget on a loaded machine too.
        CARD_AUTHORIZATION_BUDGET: "30 seconds"
      }
      // On a chain of its own (CHAIN_RPC_URL) the settlement account pays its gas: the operator funds it.
      yield* fundFromAnvil(devnet, privateKeyToAccount(PROGRAM_KEY).address).pipe(Effect.orDie)
      const a = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, shared))
      const b = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, shared))
      yield* Effect.addFinalizer(() =>
        Effect.all([stopService(a, "SIGTERM"), stopService(b, "SIGTERM")], { concurrency: 2 })
      )

      const holder = yield* sandboxCardHolder(a)
      const card = (yield* callService(a, "GET", "/me", { token: holder.token })).body.card
      yield* mintUsd1(devnet, holder.account.address, parseUnits("10", 18)).pipe(Effect.orDie)
      yield* eventually(
        "the card wallet's $10 followed",
        queryDatabase<{ usd1: string }>(databaseUrl, "SELECT usd1::text FROM card_wallet_balances WHERE address = $1", [
          holder.account.address
        ]),
        (rows) => rows[0]?.usd1 === parseUnits("10", 18).toString()
      )

      // The holder's spending allowance, far above the funds: the funds are the bound here.
      const requested = yield* callService(a, "POST", "/card/allowance/request", {
        token: holder.token,
        json: { capUsd: 1000, validDays: 30 }
      })
      const signature = yield* Effect.promise(() => holder.account.signTypedData(requested.body.typedData))
      const submitted = yield* callService(b, "POST", "/card/allowance", { token: holder.token, json: { signature } })
      expect(submitted.status, JSON.stringify(submitted.body)).toBe(202)
      yield* eventually(
        "the spending allowance active",
        callService(a, "GET", "/card/allowance", { token: holder.token }),
        (answer) => answer.body.state === "active"
      )

      const answers = yield* Effect.all(
        Array.from({ length: 100 }, (_, i) =>
          callService(i % 2 === 0 ? a : b, "POST", "/sandbox/card-network/authorizations", {
            json: { cardNumber: card.number, expiry: card.expiry, cvv: card.cvv, amountUsd: "1.00", merchant: COFFEE }
          })
        ),
        { concurrency: 100 }
      )
      expect(answers.map((answer) => answer.status)).toEqual(Array(100).fill(200))
      const reasons = answers.map((answer) => answer.body.reason ?? "approved")
      expect(
        reasons.filter((reason) => reason === "approved"),
        reasons.join(",")
      ).toHaveLength(10)
      const approved = answers.filter((answer) => answer.body.approved === true)
      expect(approved).toHaveLength(10)
      expect(answers.filter((answer) => answer.body.approved === false).map((answer) => answer.body.reason)).toEqual(
        Array(90).fill("insufficient_funds")
      )

      const [held] = yield* queryDatabase<{ held: string; approved: string; declined: string }>(
        databaseUrl,
        `SELECT coalesce(sum(held_micros), 0)::text AS held, count(*) FILTER (WHERE approved)::text AS approved,
                count(*) FILTER (WHERE NOT approved)::text AS declined
         FROM card_authorizations WHERE address = $1`,
        [holder.account.address]
      )
      expect(held).toEqual({ held: "10000000", approved: "10", declined: "90" })
    })
  )
})
