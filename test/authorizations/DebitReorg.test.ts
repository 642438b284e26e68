/**
 * A debit whose block is reorganised out (`anvil_reorg`: the block replaced by an empty one) is sent
 * again as the very same transaction, once; it is mined again, the card pays once, and the holder's
 * events stay in order: one `debited`, nothing owed.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { erc20Abi } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { publicClientFor } from "../../src/chain/Devnet.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { fundedCardHolder, swipe } from "../support/cards.js"
import { send } from "../support/http.js"
import { captureLogs } from "../support/logs.js"
import { OwnDatabase } from "../support/reconcile.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const PROGRAM_KEY = generatePrivateKey()
const SETTLEMENT = privateKeyToAccount(PROGRAM_KEY).address
const CONFIRMATIONS = 5
const logs = captureLogs()

const transferOf = (cardId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ hash: string; state: string; minedHash: string | null; block: string | null }>`
      SELECT hash, state, mined_hash, block::text FROM card_program_transfers WHERE card_id = ${cardId}`
  ).pipe(Effect.orDie)

describe("a debit reorganised out (devnet)", () => {
  layer(
    testServer(
      { CARD_PROGRAM_KEY: PROGRAM_KEY, CHAIN_CONFIRMATIONS: String(CONFIRMATIONS), LOG_LEVEL: "Info" },
      { kycProvider: ScriptedKycProvider.layer() },
      OwnDatabase
    ).pipe(Layer.provide(logs.layer)),
    { excludeTestServices: true, timeout: "120 seconds" }
  )((it) => {
    it.effect("is mined again as the same transaction, sent again once: the card pays once, events in order", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const client = publicClientFor(devnet)
        const holder = yield* fundedCardHolder("20")
        const id = (yield* swipe(holder.card, "3.00")).body.id as string
        const sql = yield* SqlClient.SqlClient
        yield* send("POST", `/sandbox/card-network/authorizations/${id}/clear`, { json: {} })

        const [mined] = yield* eventually("the debit mined, not final", transferOf(holder.cardId), ([row]) => {
          return row?.state === "mined"
        })
        const head = yield* Effect.promise(() => client.getBlockNumber())
        expect(BigInt(mined!.block!)).toBe(head)

        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        expect(((yield* devnetRpc(devnet, "anvil_reorg", [1, []])) as { error?: unknown }).error).toBeUndefined()
        const replaced = yield* Effect.promise(() => client.getBlock({ blockNumber: head }))
        expect(replaced.transactions).not.toContain(mined!.hash)
        yield* eventually(
          "the debit sent again",
          Effect.sync(() => logs.said("WARN", "a card debit's block went away")),
          (said) => {
            return said.length > 0
          }
        )
        yield* devnetRpc(devnet, "evm_setAutomine", [true])
        yield* devnetRpc(devnet, "evm_mine")
        for (let i = 0; i < CONFIRMATIONS; i++) yield* devnetRpc(devnet, "evm_mine")
        const [final] = yield* eventually("the same transaction final", transferOf(holder.cardId), ([row]) => {
          return row?.state === "final"
        })
        expect(final).toMatchObject({ hash: mined!.hash, minedHash: mined!.hash })
        const receipt = yield* Effect.promise(() =>
          client.getTransactionReceipt({ hash: mined!.hash as `0x${string}` })
        )
        expect(receipt.status).toBe("success")
        expect(receipt.blockHash).not.toBe(replaced.hash)

        expect(logs.said("WARN", "a card debit's block went away")).toHaveLength(1)
        const toSettlement = yield* Effect.promise(() =>
          client.getContractEvents({
            address: devnet.usd1,
            abi: erc20Abi,
            eventName: "Transfer",
            args: { to: SETTLEMENT },
            fromBlock: 0n
          })
        )
        expect(toSettlement.map((log) => log.transactionHash)).toEqual([mined!.hash])
        expect(
          yield* Effect.promise(() =>
            client.readContract({ address: devnet.usd1, abi: erc20Abi, functionName: "balanceOf", args: [SETTLEMENT] })
          )
        ).toBe(3n * 10n ** 18n)
        const events = yield* sql<{ data: { change: string; tx: string } }>`
          SELECT data FROM events WHERE address = ${holder.account.address} AND type = 'money' ORDER BY id`.pipe(
          Effect.orDie
        )
        expect(events.map(({ data }) => [data.change, data.tx])).toEqual([["debited", mined!.hash]])
      })
    )
  })
})
