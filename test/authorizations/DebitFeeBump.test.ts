/**
 * A debit the chain does not mine in time is replaced at its nonce with a higher fee (a fee bump),
 * recorded before it is sent: whichever version is mined, the card pays once.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { erc20Abi } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { publicClientFor } from "../../src/chain/Devnet.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { fundedCardHolder, swipe, usd1OnChain } from "../support/cards.js"
import { send } from "../support/http.js"
import { OwnDatabase } from "../support/reconcile.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const PROGRAM_KEY = generatePrivateKey()
const SETTLEMENT = privateKeyToAccount(PROGRAM_KEY).address

const transferOf = (cardId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{
        hash: string
        earlierHashes: ReadonlyArray<string>
        bumps: number
        state: string
        minedHash: string | null
      }>`
      SELECT hash, earlier_hashes, bumps, state, mined_hash FROM card_program_transfers WHERE card_id = ${cardId}`
  ).pipe(Effect.orDie)

describe("a debit not mined in time (devnet)", () => {
  layer(
    testServer(
      { CARD_PROGRAM_KEY: PROGRAM_KEY, RELAYER_STUCK_AFTER: "2 seconds" },
      { kycProvider: ScriptedKycProvider.layer() },
      OwnDatabase
    ),
    { excludeTestServices: true, timeout: "120 seconds" }
  )((it) => {
    it.effect("is bumped at its nonce, recorded first; the bumped version is mined and the card pays once", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const holder = yield* fundedCardHolder("20")
        const id = (yield* swipe(holder.card, "2.50")).body.id as string

        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* send("POST", `/sandbox/card-network/authorizations/${id}/clear`, { json: {} })
        const [bumped] = yield* eventually("the debit bumped", transferOf(holder.cardId), ([row]) => {
          return (row?.bumps ?? 0) >= 1
        })
        expect(bumped!.earlierHashes).toHaveLength(bumped!.bumps)
        expect(bumped!.earlierHashes).not.toContain(bumped!.hash)
        yield* devnetRpc(devnet, "evm_setAutomine", [true])
        yield* devnetRpc(devnet, "evm_mine")

        const [mined] = yield* eventually("the debit mined", transferOf(holder.cardId), ([row]) => {
          return row?.minedHash != null
        })
        // The node keeps one transaction per nonce: the last version it took is the one mined.
        expect([mined!.hash, ...mined!.earlierHashes]).toContain(mined!.minedHash)
        const logs = yield* Effect.promise(() =>
          publicClientFor(devnet).getContractEvents({
            address: devnet.usd1,
            abi: erc20Abi,
            eventName: "Transfer",
            args: { to: SETTLEMENT },
            fromBlock: 0n
          })
        )
        expect(logs.map((log) => log.transactionHash)).toEqual([mined!.minedHash])
        expect(yield* usd1OnChain(SETTLEMENT)).toBe(25n * 10n ** 17n)
        expect(yield* usd1OnChain(holder.account.address)).toBe(175n * 10n ** 17n)
      })
    )
  })
})
