/**
 * Clearings debited exactly once across processes and a crash: 50 clearings of 10 cards sent
 * concurrently to two service processes over one database and one devnet, one of them SIGKILLed
 * halfway. The chain holds exactly 50 transfers to the settlement account, their sum is its gain,
 * and every card payment is settled with its transaction.
 */
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { erc20Abi, type Hex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { transactionUpdatedBody } from "../../src/authorizations/LithicWire.js"
import { secretKey, sign } from "../../src/authorizations/StandardWebhooks.js"
import { publicClientFor } from "../../src/chain/Devnet.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { COFFEE, cardToken, fundedCardHolder, fundFromAnvil, NETWORK_SECRET, swipe } from "../support/cards.js"
import { bearer, send } from "../support/http.js"
import { callService, devnetServiceEnv, type ServiceProcess, startService, stopService } from "../support/process.js"
import { DatabaseUrl, OwnDatabase } from "../support/reconcile.js"
import { TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const PROGRAM_KEY = generatePrivateKey()
const SETTLEMENT = privateKeyToAccount(PROGRAM_KEY).address
const CARDS = 10
const PER_CARD = 5

/** The clearing of a whole authorization, as the network sends it, to one replica. */
const clear = (
  service: ServiceProcess,
  payment: { readonly id: string; readonly cardToken: string; readonly cents: number }
) => {
  const body = transactionUpdatedBody({
    token: payment.id,
    cardToken: payment.cardToken,
    status: "SETTLED",
    merchant: { name: COFFEE.name, mcc: COFFEE.mcc, city: COFFEE.city, country: COFFEE.country },
    events: [{ id: `${payment.id}-clearing`, type: "clearing", cents: payment.cents }],
    at: new Date()
  })
  const headers = sign(secretKey(NETWORK_SECRET)!, `msg-${payment.id}`, JSON.stringify(body), Date.now())
  return callService(service, "POST", "/card-network/messages", { json: body, headers: { ...headers } })
}

const settlementBalance = Effect.flatMap(TestDevnet, (devnet) =>
  Effect.promise(() =>
    publicClientFor(devnet).readContract({
      address: devnet.usd1,
      abi: erc20Abi,
      functionName: "balanceOf",
      args: [SETTLEMENT]
    })
  )
)

/** Every USD1 Transfer to the settlement account on chain. */
const transfersToSettlement = Effect.flatMap(TestDevnet, (devnet) =>
  Effect.promise(() =>
    publicClientFor(devnet).getContractEvents({
      address: devnet.usd1,
      abi: erc20Abi,
      eventName: "Transfer",
      args: { to: SETTLEMENT },
      fromBlock: 0n
    })
  )
)

describe("clearings across processes (devnet)", () => {
  layer(
    testServer(
      // This process only makes the cards and their authorizations: its own settlement ticks once at start.
      { CARD_SANDBOX_SECRET: NETWORK_SECRET, CARD_PROGRAM_KEY: PROGRAM_KEY, CARD_SETTLEMENT_POLL: "1 hour" },
      { kycProvider: ScriptedKycProvider.layer() },
      OwnDatabase
    ),
    { excludeTestServices: true, timeout: "300 seconds" }
  )((it) => {
    it.effect("50 clearings of 10 cards over two replicas, one SIGKILLed halfway: 50 transfers, settled once", () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        yield* Effect.orDie(fundFromAnvil(devnet, SETTLEMENT))
        const holders = yield* Effect.forEach(Array.from({ length: CARDS }), () => fundedCardHolder("100"))
        const payments = yield* Effect.forEach(holders, (holder, card) =>
          Effect.gen(function* () {
            const token = yield* cardToken(holder.account.address)
            return yield* Effect.forEach(Array.from({ length: PER_CARD }), (_, i) =>
              Effect.map(swipe(holder.card, ((101 + card * PER_CARD + i) / 100).toFixed(2)), (response) => {
                expect(response.body).toMatchObject({ approved: true })
                return { id: response.body.id as string, cardToken: token, cents: 101 + card * PER_CARD + i, holder }
              })
            )
          })
        ).pipe(Effect.map((perCard) => perCard.flat()))
        const before = yield* settlementBalance

        const env = {
          CARD_SANDBOX_SECRET: NETWORK_SECRET,
          CARD_PROGRAM_KEY: PROGRAM_KEY,
          CARD_SETTLEMENT_POLL: "200 millis"
        }
        const databaseUrl = yield* DatabaseUrl
        const first = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, env))
        const second = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, env))
        yield* Effect.addFinalizer(() =>
          Effect.all([stopService(first, "SIGTERM"), stopService(second, "SIGTERM")], { concurrency: 2 })
        )

        // The first half to both, at once; the first replica dies once it has recorded transfers.
        const half = payments.slice(0, 25)
        const answers = yield* Effect.forEach(half, (payment, i) => clear(i % 2 === 0 ? first : second, payment), {
          concurrency: "unbounded"
        })
        expect(answers.map((answer) => answer.status)).toEqual(half.map(() => 200))
        const sql = yield* SqlClient.SqlClient
        yield* eventually(
          "the replicas recorded transfers",
          sql<{ n: number }>`SELECT count(*)::int AS n FROM card_program_transfers`.pipe(Effect.orDie),
          ([row]) => row!.n > 0
        )
        expect(yield* stopService(first, "SIGKILL")).toBe(null)
        const rest = yield* Effect.forEach(payments.slice(25), (payment) => clear(second, payment), {
          concurrency: "unbounded"
        })
        expect(rest.map((answer) => answer.status)).toEqual(payments.slice(25).map(() => 200))

        yield* eventually(
          "every clearing debited",
          sql<{ n: number }>`SELECT count(*)::int AS n FROM card_network_events WHERE money = 'debited'`.pipe(
            Effect.orDie
          ),
          ([row]) => row!.n === payments.length
        )
        const onChain = yield* transfersToSettlement
        expect(onChain).toHaveLength(payments.length)
        const sum = payments.reduce((total, payment) => total + BigInt(payment.cents) * 10n ** 16n, 0n)
        expect(onChain.reduce((total, log) => total + log.args.value!, 0n)).toBe(sum)
        expect((yield* settlementBalance) - before).toBe(sum)
        const transfers = yield* sql<{ n: number; hashes: number }>`
          SELECT count(*)::int AS n, count(DISTINCT mined_hash)::int AS hashes FROM card_program_transfers
          WHERE kind = 'debit' AND state IN ('mined', 'final') AND settled_at IS NOT NULL`.pipe(Effect.orDie)
        expect(transfers).toEqual([{ n: payments.length, hashes: payments.length }])
        const minedHashes = new Set(onChain.map((log) => log.transactionHash as Hex))
        for (const holder of holders) {
          const activity = yield* send("GET", "/me/activity?limit=50", { headers: bearer(holder.token) })
          const cardPayments = (activity.body as ReadonlyArray<{ type: string; status: string; tx?: Hex }>).filter(
            (item) => item.type === "card_payment"
          )
          expect(cardPayments).toHaveLength(PER_CARD)
          for (const item of cardPayments) {
            expect(item.status).toBe("settled")
            expect(minedHashes.has(item.tx!)).toBe(true)
          }
        }
      }).pipe(Effect.scoped)
    )
  })
})
