/**
 * The spending allowance on the devnet: a permit signed through the API becomes the token's allowance
 * for the card program's settlement account, authorizations count it, and a revocation on chain is
 * noticed by the next block.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { erc20Abi, type Hex, parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { publicClientFor } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { cardHolder } from "../support/agent.js"
import { newAccount, signIn } from "../support/auth.js"
import { allowanceOf, followedUsd1, revokeOnChain, signAllowance, swipe } from "../support/cards.js"
import { bearer, send } from "../support/http.js"
import { TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

/** A card holder whose key the test keeps (to act on chain), with `usd1` USD1 followed, and no allowance yet. */
const holderWithKey = (usd1: string) =>
  Effect.gen(function* () {
    const key = generatePrivateKey()
    const holder = yield* cardHolder("Grace Hopper", privateKeyToAccount(key))
    const devnet = yield* TestDevnet
    yield* Effect.orDie(mintUsd1(devnet, holder.account.address, parseUnits(usd1, 18)))
    yield* eventually("the card wallet's balance followed", followedUsd1(holder.account.address), (seen) => {
      return seen === Number(usd1)
    })
    const me = yield* send("GET", "/me", { headers: bearer(holder.token) })
    return { ...holder, key, card: me.body.card as { number: string; expiry: string; cvv: string } }
  })

const onChainAllowance = (owner: Hex, spender: Hex) =>
  Effect.flatMap(TestDevnet, (devnet) =>
    Effect.promise(() =>
      publicClientFor(devnet).readContract({
        address: devnet.usd1,
        abi: erc20Abi,
        functionName: "allowance",
        args: [owner, spender]
      })
    )
  )

describe("the spending allowance (devnet)", () => {
  layer(testServer({}, { kycProvider: ScriptedKycProvider.layer() }), { excludeTestServices: true })((it) => {
    it.effect("a permit signed through the API is the token's allowance, active, and card payments count on it", () =>
      Effect.gen(function* () {
        const holder = yield* holderWithKey("20")
        expect(yield* allowanceOf(holder.token)).toMatchObject({ state: "none", capUsd: 0, remainingUsd: 0 })
        const without = yield* swipe(holder.card, "1.00")
        expect(without.body).toMatchObject({ approved: false, reason: "allowance_missing" })

        const { typedData, submitted } = yield* signAllowance(holder, 5, { untilActive: false })
        expect(typedData).toMatchObject({
          primaryType: "Permit",
          domain: { name: "World Liberty Financial USD", version: "1", chainId: 31337 },
          message: { owner: holder.account.address, value: parseUnits("5", 18).toString() }
        })
        expect(submitted).toMatchObject({ capUsd: 5, spender: typedData.message.spender })
        expect(submitted.tx).toMatch(/^0x[0-9a-f]{64}$/)
        const active = yield* eventually("active", allowanceOf(holder.token), (seen) => seen.state === "active")
        expect(active).toMatchObject({ capUsd: 5, usedUsd: 0, remainingUsd: 5 })
        expect(yield* onChainAllowance(holder.account.address, typedData.message.spender)).toBe(parseUnits("5", 18))

        // $20 in the wallet, $5 allowed: the allowance is the bound.
        expect((yield* swipe(holder.card, "6.00")).body).toMatchObject({
          approved: false,
          reason: "allowance_exceeded"
        })
        expect((yield* swipe(holder.card, "4.00")).body).toMatchObject({ approved: true })
        expect(yield* allowanceOf(holder.token)).toMatchObject({ state: "active", usedUsd: 4, remainingUsd: 1 })
        expect((yield* swipe(holder.card, "1.01")).body).toMatchObject({ reason: "allowance_exceeded" })
      })
    )

    it.effect(
      "revoked on chain, it is noticed by the next block: the next authorization declines allowance_missing",
      () =>
        Effect.gen(function* () {
          const holder = yield* holderWithKey("20")
          const { typedData } = yield* signAllowance(holder, 100)
          expect((yield* swipe(holder.card, "2.00")).body).toMatchObject({ approved: true })

          yield* revokeOnChain(holder, typedData.message.spender)
          const revoked = yield* eventually("revoked", allowanceOf(holder.token), (seen) => seen.state === "revoked")
          expect(revoked).toMatchObject({ remainingUsd: 0, usedUsd: 2 })
          expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({
            approved: false,
            reason: "allowance_missing"
          })

          // Signed again, it is active again.
          yield* signAllowance(holder, 50)
          expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: true })
        })
    )

    it.effect("past its deadline it is expired and spends nothing", () =>
      Effect.gen(function* () {
        const holder = yield* holderWithKey("20")
        yield* signAllowance(holder, 100, { validDays: 1 })
        const sql = yield* SqlClient.SqlClient
        yield* Effect.orDie(
          sql`UPDATE card_allowances SET deadline = now() - interval '1 second' WHERE card_id = ${holder.cardId}`
        )
        expect(yield* allowanceOf(holder.token)).toMatchObject({ state: "expired", remainingUsd: 0 })
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ reason: "allowance_missing" })
      })
    )

    it.effect("what is refused: bad input, no request, another key's signature, a second submission", () =>
      Effect.gen(function* () {
        const holder = yield* holderWithKey("1")
        const headers = bearer(holder.token)
        for (const json of [
          { capUsd: 0, validDays: 30 },
          { capUsd: 10.001, validDays: 30 },
          { capUsd: 10, validDays: 0 },
          { capUsd: 10, validDays: 1.5 },
          { capUsd: 10 }
        ]) {
          const refused = yield* send("POST", "/card/allowance/request", { headers, json })
          expect(refused.status, JSON.stringify(json)).toBe(400)
          expect(refused.body.code).toBe("BAD_REQUEST")
        }
        const signature = `0x${"11".repeat(65)}`
        const early = yield* send("POST", "/card/allowance", { headers, json: { signature } })
        expect(early.status).toBe(409)
        expect(early.body.code).toBe("ALLOWANCE_NOT_REQUESTED")
        expect((yield* send("POST", "/card/allowance", { headers, json: { signature: "0x12" } })).status).toBe(400)

        const requested = yield* send("POST", "/card/allowance/request", {
          headers,
          json: { capUsd: 10, validDays: 7 }
        })
        const stranger = yield* Effect.promise(() => newAccount().signTypedData(requested.body.typedData))
        const forged = yield* send("POST", "/card/allowance", { headers, json: { signature: stranger } })
        expect(forged.status).toBe(400)
        expect(forged.body.code).toBe("ALLOWANCE_SIGNATURE_INVALID")
        expect(yield* allowanceOf(holder.token)).toMatchObject({ state: "none" })

        const own = yield* Effect.promise(() => holder.account.signTypedData(requested.body.typedData))
        expect((yield* send("POST", "/card/allowance", { headers, json: { signature: own } })).status).toBe(202)
        const again = yield* send("POST", "/card/allowance", { headers, json: { signature: own } })
        expect(again.status).toBe(409)
        expect(again.body.code).toBe("ALLOWANCE_NOT_REQUESTED")

        const cardless = yield* signIn(newAccount())
        const noCard = yield* send("GET", "/card/allowance", { headers: bearer(cardless.token) })
        expect(noCard.status).toBe(404)
        expect(noCard.body.code).toBe("CARD_NOT_FOUND")
        expect((yield* send("GET", "/card/allowance")).status).toBe(401)
      })
    )
  })
})
