/**
 * The money behind the card on the devnet: a clearing is debited from the card wallet to the
 * settlement account once, its statement item settles with the transaction, a refund comes back once
 * however often the network delivers it, and a clearing the wallet or its allowance cannot cover is
 * owed and freezes the card; one not mined in time is bumped at its nonce. The reconciliation agrees.
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { erc20Abi, type Hex, parseEventLogs, parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { transactionUpdatedBody } from "../../src/authorizations/LithicWire.js"
import { publicClientFor } from "../../src/chain/Devnet.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import {
  allowanceOf,
  COFFEE,
  cardToken,
  fundedCardHolder,
  NETWORK_SECRET,
  postNetworkMessage,
  revokeOnChain,
  swipe,
  usd1OnChain
} from "../support/cards.js"
import { bearer, send } from "../support/http.js"
import { devnetServiceEnv } from "../support/process.js"
import { DatabaseUrl, OwnDatabase, runReconcile } from "../support/reconcile.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const usd1 = (usd: string) => parseUnits(usd, 18)

/** The settlement account's key: the file's own, so that the reconciliation sees only its transfers. */
const PROGRAM_KEY = generatePrivateKey()
const SETTLEMENT = privateKeyToAccount(PROGRAM_KEY).address

/** The holder's statement item for a card payment or refund. */
const statementItem = (token: string, id: string) =>
  Effect.map(send("GET", "/me/activity?limit=50", { headers: bearer(token) }), (response) => {
    expect(response.status).toBe(200)
    return (response.body as ReadonlyArray<{ id: string; status?: string; tx?: string; usd: number }>).find(
      (item) => item.id === id
    )
  })

const transfersOf = (address: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ eventId: string; kind: string; state: string; minedHash: string | null; amount: string }>`
      SELECT event_id, kind, state, mined_hash, amount::text FROM card_program_transfers
      WHERE wallet = ${address} ORDER BY seq`
  ).pipe(Effect.orDie)

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

const moneyEvents = (address: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) =>
      sql<{ data: { change: string; amountUsd: number; tx: string | null; owedUsd: number } }>`
      SELECT data FROM events WHERE address = ${address} AND type = 'money' ORDER BY id`
  ).pipe(
    Effect.orDie,
    Effect.map((rows) => rows.map((row) => row.data))
  )

/** The USD1 Transfer logs of a mined transaction. */
const transfersIn = (hash: Hex) =>
  Effect.flatMap(TestDevnet, (devnet) =>
    Effect.promise(async () => {
      const receipt = await publicClientFor(devnet).getTransactionReceipt({ hash })
      return parseEventLogs({ abi: erc20Abi, logs: receipt.logs, eventName: "Transfer" }).map((log) => log.args)
    })
  )

describe("the money behind the card (devnet)", () => {
  layer(
    testServer(
      { CARD_SANDBOX_SECRET: NETWORK_SECRET, CARD_PROGRAM_KEY: PROGRAM_KEY, RELAYER_STUCK_AFTER: "2 seconds" },
      { kycProvider: ScriptedKycProvider.layer() },
      OwnDatabase
    ),
    { excludeTestServices: true, timeout: "120 seconds" }
  )((it) => {
    it.effect(
      "a clearing is debited once: the wallet pays the settlement account, the item settles with its hash",
      () =>
        Effect.gen(function* () {
          const holder = yield* fundedCardHolder("20")
          const { spender } = (yield* allowanceOf(holder.token)) as unknown as { spender: Hex }
          const programBefore = yield* usd1OnChain(spender)

          const authorized = yield* swipe(holder.card, "5.25")
          expect(authorized.body).toMatchObject({ approved: true })
          const id = authorized.body.id as string
          const cleared = yield* send("POST", `/sandbox/card-network/authorizations/${id}/clear`, { json: {} })
          expect(cleared.status, JSON.stringify(cleared.body)).toBe(200)

          const item = yield* eventually(
            "the card payment settled",
            statementItem(holder.token, `card-${id}`),
            (seen) => {
              return seen?.status === "settled"
            }
          )
          expect(item).toMatchObject({ usd: 5.25, tx: expect.stringMatching(/^0x[0-9a-f]{64}$/) })
          expect(yield* usd1OnChain(spender)).toBe(programBefore + usd1("5.25"))
          expect(yield* usd1OnChain(holder.account.address)).toBe(usd1("14.75"))
          expect(yield* transfersIn(item!.tx as Hex)).toEqual([
            { from: holder.account.address, to: spender, value: usd1("5.25") }
          ])

          const [transfer, ...more] = yield* transfersOf(holder.account.address)
          expect(more).toEqual([])
          expect(transfer).toMatchObject({
            kind: "debit",
            state: "final",
            minedHash: item!.tx,
            amount: `${usd1("5.25")}`
          })
          expect(yield* moneyEvents(holder.account.address)).toEqual([
            {
              change: "debited",
              amountUsd: 5.25,
              tx: item!.tx,
              owedUsd: 0,
              authorizationId: id,
              eventId: transfer!.eventId
            }
          ])
          const listed = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
          expect(listed.body[0]).toMatchObject({ id, status: "settled", clearedUsd: 5.25, heldUsd: 0 })
          // The allowance counts what was taken.
          expect(yield* allowanceOf(holder.token)).toMatchObject({ state: "active", usedUsd: 5.25 })
        })
    )

    it.effect("a refund comes back to the card wallet once, however often the network delivers it", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("30")
        const authorized = yield* swipe(holder.card, "12.00")
        const id = authorized.body.id as string
        yield* send("POST", `/sandbox/card-network/authorizations/${id}/clear`, { json: {} })
        yield* eventually("the payment settled", statementItem(holder.token, `card-${id}`), (seen) => {
          return seen?.status === "settled"
        })
        expect(yield* usd1OnChain(holder.account.address)).toBe(usd1("18"))

        // The network's refund message, delivered three times (a processor retries until it hears 200).
        const refund = transactionUpdatedBody({
          token: randomUUID(),
          cardToken: yield* cardToken(holder.account.address),
          status: "SETTLED",
          merchant: { name: COFFEE.name, mcc: COFFEE.mcc, city: COFFEE.city, country: COFFEE.country },
          events: [{ id: randomUUID(), type: "refund", cents: 450 }],
          at: new Date()
        })
        for (let delivery = 0; delivery < 3; delivery++) {
          expect((yield* postNetworkMessage(refund)).status).toBe(200)
        }
        const eventId = refund.events[0]!.token
        const item = yield* eventually(
          "the refund settled",
          statementItem(holder.token, `card-refund-${eventId}`),
          (seen) => seen?.status === "settled"
        )
        expect(item).toMatchObject({ usd: 4.5, tx: expect.stringMatching(/^0x[0-9a-f]{64}$/) })
        expect(yield* usd1OnChain(holder.account.address)).toBe(usd1("22.5"))
        // Later ticks and another delivery move nothing more.
        expect((yield* postNetworkMessage(refund)).status).toBe(200)
        yield* Effect.sleep("2 seconds")
        expect(yield* usd1OnChain(holder.account.address)).toBe(usd1("22.5"))
        const transfers = yield* transfersOf(holder.account.address)
        expect(transfers.map((transfer) => [transfer.kind, transfer.state])).toEqual([
          ["debit", "final"],
          ["refund", "final"]
        ])
        expect((yield* moneyEvents(holder.account.address)).map((event) => event.change)).toEqual([
          "debited",
          "credited"
        ])
      })
    )

    it.effect("allowance revoked: the next authorization declines, the pending clearing is owed, the card frozen", () =>
      Effect.gen(function* () {
        const holder = yield* fundedCardHolder("20")
        const { spender } = (yield* allowanceOf(holder.token)) as unknown as { spender: Hex }
        const programBefore = yield* usd1OnChain(spender)
        const authorized = yield* swipe(holder.card, "8.00")
        const id = authorized.body.id as string

        yield* revokeOnChain(holder, spender)
        yield* eventually("revoked", allowanceOf(holder.token), (seen) => seen.state === "revoked")
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: false, reason: "allowance_missing" })

        yield* send("POST", `/sandbox/card-network/authorizations/${id}/clear`, { json: {} })
        const me = yield* eventually(
          "the clearing owed",
          Effect.map(send("GET", "/me", { headers: bearer(holder.token) }), (response) => response.body),
          (body) => body.owedUsd === 8
        )
        expect(me.owedUsd).toBe(8)
        const controls = yield* send("GET", "/card/controls", { headers: bearer(holder.token) })
        expect(controls.body).toMatchObject({ frozen: true, frozenReason: "amount_owed", owedUsd: 8 })
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: false, reason: "card_frozen" })
        // Nothing moved on chain, nothing was sent, and the holder was told.
        expect(yield* usd1OnChain(spender)).toBe(programBefore)
        expect(yield* usd1OnChain(holder.account.address)).toBe(usd1("20"))
        expect(yield* transfersOf(holder.account.address)).toEqual([])
        expect(yield* moneyEvents(holder.account.address)).toEqual([
          expect.objectContaining({ change: "owed", amountUsd: 8, owedUsd: 8, authorizationId: id, tx: null })
        ])
        const sql = yield* SqlClient.SqlClient
        const entries = yield* sql<{ amountMicros: string }>`
          SELECT amount_micros::text FROM card_owed_entries WHERE card_id = ${holder.cardId}`.pipe(Effect.orDie)
        expect(entries).toEqual([{ amountMicros: "8000000" }])
        // A holder who unfreezes their own freeze does not thaw what is owed.
        const patched = yield* send("PUT", "/card/controls", { headers: bearer(holder.token), json: { frozen: false } })
        expect(patched.body).toMatchObject({ frozen: true, frozenReason: "amount_owed" })
      })
    )

    it.effect(
      "a debit not mined in time is bumped at its nonce, recorded first; one version is mined, the card pays once",
      () =>
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
          expect(
            logs.filter((log) => log.args.from === holder.account.address).map((log) => log.transactionHash)
          ).toEqual([mined!.minedHash])
          expect(yield* usd1OnChain(holder.account.address)).toBe(175n * 10n ** 17n)
        })
    )

    it.effect(
      "npm run cards:reconcile over all of the above: no difference; one planted in the database is reported",
      () =>
        Effect.gen(function* () {
          const env = yield* devnetServiceEnv(yield* TestDevnet, yield* DatabaseUrl, { CARD_PROGRAM_KEY: PROGRAM_KEY })
          const clean = yield* runReconcile(env)
          expect(clean.code, clean.output).toBe(0)
          expect(clean.summary).toMatchObject({
            clearings: { count: 4, micros: 27_750_000 },
            debited: { count: 3, micros: 19_750_000 },
            owed: { count: 1, micros: 8_000_000, outstandingMicros: 8_000_000 },
            pending: { count: 0 },
            refunds: { count: 1, micros: 4_500_000 },
            differences: []
          })
          expect(clean.summary.settlementAccount.balance).toBe(String(usd1("15.25")))

          const sql = yield* SqlClient.SqlClient
          yield* sql`UPDATE card_program_transfers SET amount = amount + 1 WHERE kind = 'refund'`.pipe(Effect.orDie)
          const planted = yield* runReconcile(env)
          expect(planted.code).toBe(1)
          expect(planted.summary.differences.map((difference: { kind: string }) => difference.kind)).toContain(
            "transfer_amount_mismatch"
          )
        }).pipe(Effect.scoped)
    )
  })
})
