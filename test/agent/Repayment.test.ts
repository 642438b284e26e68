/**
 * The agent and the money behind the card, in one process on the real devnet: a card that owes the
 * card program (a clearing its wallet could not pay, set up in SQL as the settlement engine leaves
 * it) is repaid by the agent's next refill, straight to the settlement account, exactly once; and a
 * refill counts the card's holds, pending clearings, owed amount and allowance; a repayment not mined
 * in time is never paid again, and is recorded once the chain mines it; and the issue's acceptance end
 * to end, the settlement engine making the debt: an allowance revoked, a clearing owed, the card
 * frozen, the agent's refill repays it and the card thaws. Ticks are run by the test at
 * fixed instants (the scheduled loop waits a day).
 */
import { randomUUID } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { createPublicClient, erc20Abi, http, parseUnits } from "viem"
import { AgentLoop } from "../../src/agent/AgentLoop.js"
import { ceilCents } from "../../src/agent/Decide.js"
import { CardDebts } from "../../src/cards/CardDebts.js"
import { Statement } from "../../src/cards/Statement.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { cardHolder } from "../support/agent.js"
import {
  allowanceOf,
  followedUsd1,
  fundedCardHolder,
  NETWORK_SECRET,
  revokeOnChain,
  signAllowance,
  swipe
} from "../support/cards.js"
import { readEvents } from "../support/events.js"
import { bearer, send } from "../support/http.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

/** Friday 2026-11-20 15:40 ET: the regular session's last half hour. */
const FRIDAY_1540_ET = Date.parse("2026-11-20T20:40:00Z")
/** Saturday 2026-11-21 15:00 UTC: the market is closed, nothing is rebalanced. */
const SATURDAY = Date.parse("2026-11-21T15:00:00Z")
const strategy = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 140 }
/** USD1 atomic units per millionth of a dollar (18 decimals). */
const PER_MICRO = 10n ** 12n

const balanceOf = (token: `0x${string}`, owner: `0x${string}`) =>
  Effect.flatMap(TestDevnet, (devnet) =>
    Effect.promise(() =>
      createPublicClient({ transport: http(devnet.rpcUrl) }).readContract({
        address: token,
        abi: erc20Abi,
        functionName: "balanceOf",
        args: [owner]
      })
    )
  )

const query = <A extends object>(statement: (sql: SqlClient.SqlClient) => Effect.Effect<ReadonlyArray<A>, unknown>) =>
  Effect.flatMap(SqlClient.SqlClient, statement).pipe(Effect.orDie)

/** A card holder with a strategy and a funded agent wallet (gas, $25 of USD1, stock tokens). */
const agentCustomer = Effect.gen(function* () {
  const holder = yield* cardHolder()
  expect((yield* send("PUT", "/strategy", { headers: bearer(holder.token), json: strategy })).status).toBe(200)
  return holder
})

/**
 * What the settlement engine leaves when a clearing of `micros` cannot be debited: the clearing's
 * network event with money 'owed', its ledger entry, and the card's owed amount raised, in one transaction.
 */
const oweClearing = (
  card: { readonly cardId: string; readonly account: { readonly address: string } },
  micros: bigint
) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) => {
    const eventId = `clearing-${randomUUID()}`
    return sql.withTransaction(
      Effect.all([
        sql`INSERT INTO card_network_events (id, transaction_id, card_id, address, kind, amount_micros, money,
                                            merchant_name, merchant_mcc, merchant_country, created_at)
            VALUES (${eventId}, ${randomUUID()}, ${card.cardId}, ${card.account.address}, 'clearing',
                    ${micros.toString()}::bigint, 'owed', 'Blue Bottle', '5814', 'USA', now())`,
        sql`INSERT INTO card_owed_entries (card_id, amount_micros, event_id, created_at)
            VALUES (${card.cardId}, ${micros.toString()}::bigint, ${eventId}, now())`,
        sql`UPDATE cards SET owed_micros = owed_micros + ${micros.toString()}::bigint WHERE id = ${card.cardId}`
      ])
    )
  }).pipe(Effect.orDie)

/** Makes the card due for the next tick (a second back: see Loop.test.ts), its cooldown over. */
const makeDue = (cardId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`UPDATE agent_strategies SET due_at = now() - interval '1 second', trade_after = NULL
                 WHERE card_id = ${cardId}`
  ).pipe(Effect.orDie)

const server = testServer(
  {
    AGENT_MODE: "live",
    AGENT_INTERVAL: "1 hour",
    AGENT_POLL: "24 hours",
    // The settlement engine looks once, at start: a pending clearing the tests plant stays pending.
    CARD_SETTLEMENT_POLL: "24 hours"
  },
  { kycProvider: ScriptedKycProvider.layer() }
)

layer(server, { excludeTestServices: true, timeout: "120 seconds" })("a card that owes the card program", (it) => {
  it.scoped(
    "the next refill repays exactly what it owes to the settlement account, once; the card thaws and its holder is told",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const loop = yield* AgentLoop
        const debts = yield* CardDebts
        const customer = yield* agentCustomer
        // The card holds plenty: what it owes is the only reason to refill. More than the wallet's $25 of
        // cash, so a token is sold for it.
        yield* Effect.orDie(mintUsd1(devnet, customer.account.address, parseUnits("500", 18)))
        const owedMicros = 40_123_456n
        yield* oweClearing(customer, owedMicros)
        const stream = yield* readEvents({ token: customer.token })
        const standing = Effect.all({
          owedUsd: Effect.map(send("GET", "/me", { headers: bearer(customer.token) }), (me) => me.body.owedUsd),
          frozenReason: Effect.map(
            send("GET", "/card/controls", { headers: bearer(customer.token) }),
            (controls) => controls.body.frozenReason
          )
        })
        expect(yield* standing).toEqual({ owedUsd: 40.123456, frozenReason: "amount_owed" })
        const account = debts.settlementAccount
        const accountBefore = yield* balanceOf(devnet.usd1, account)
        const cardBefore = yield* balanceOf(devnet.usd1, customer.account.address)

        const summary = yield* loop.tick(FRIDAY_1540_ET)
        expect(summary.executed).toBe(1)
        const [decision] = yield* query(
          (sql) =>
            sql<{ id: string; action: string; rule: string; status: string; usd: number; repayMicros: string }>`
            SELECT id, action, rule, status, usd, repay_micros FROM agent_decisions WHERE card_id = ${customer.cardId}`
        )
        expect(decision).toMatchObject({ action: "refill", rule: "REPAY_OWED", status: "executed", usd: 40.13 })
        expect(BigInt(decision!.repayMicros)).toBe(owedMicros)
        const steps = yield* query(
          (sql) =>
            sql<{ step: string; hash: string; amount: string; status: string }>`
            SELECT step, hash, amount, status FROM agent_transactions WHERE decision_id = ${decision!.id}
            ORDER BY created_at`
        )
        expect(steps.map((tx) => tx.step)).toEqual(["approve", "sell", "repay", "send"])
        const repay = steps.find((tx) => tx.step === "repay")!
        expect(repay).toMatchObject({ status: "succeeded", amount: (owedMicros * PER_MICRO).toString() })

        // On chain: the settlement account got exactly what was owed; the card the rest of the refill.
        expect((yield* balanceOf(devnet.usd1, account)) - accountBefore).toBe(owedMicros * PER_MICRO)
        expect((yield* balanceOf(devnet.usd1, customer.account.address)) - cardBefore).toBe(
          parseUnits("40.13", 18) - owedMicros * PER_MICRO
        )

        // The program's books: nothing owed, the ledger sums to 0, the clearing repaid.
        const [card] = yield* query(
          (sql) => sql<{ owedMicros: string }>`SELECT owed_micros FROM cards WHERE id = ${customer.cardId}`
        )
        expect(card!.owedMicros).toBe("0")
        const [ledger] = yield* query(
          (sql) =>
            sql<{ total: string; entries: number }>`
            SELECT sum(amount_micros)::text AS total, count(*)::int AS entries FROM card_owed_entries
            WHERE card_id = ${customer.cardId}`
        )
        expect(ledger).toEqual({ total: "0", entries: 2 })
        const clearings = yield* query(
          (sql) => sql<{ money: string }>`SELECT money FROM card_network_events WHERE card_id = ${customer.cardId}`
        )
        expect(clearings).toEqual([{ money: "repaid" }])
        // The card thaws: the holder's own reads say so.
        expect(yield* standing).toEqual({ owedUsd: 0, frozenReason: null })

        // The holder is told, on the live stream: repaid, nothing owed any more (the card thaws).
        const told = yield* stream.await(
          "money (repaid)",
          (event) => event.event === "money" && event.data.change === "repaid"
        )
        expect(told.data).toEqual({
          change: "repaid",
          amountUsd: 40.123456,
          authorizationId: null,
          eventId: null,
          tx: repay.hash,
          owedUsd: 0
        })

        // A second pass finds nothing owed and pays nothing more; recording the same repayment again changes nothing.
        const accountAfter = yield* balanceOf(devnet.usd1, account)
        yield* makeDue(customer.cardId)
        yield* loop.tick(SATURDAY)
        const decisions = yield* query(
          (sql) =>
            sql<{ action: string; repayMicros: string | null }>`
            SELECT action, repay_micros FROM agent_decisions WHERE card_id = ${customer.cardId} ORDER BY id`
        )
        expect(decisions).toHaveLength(2)
        expect(decisions[1]).toEqual({ action: "none", repayMicros: null })
        expect(yield* balanceOf(devnet.usd1, account)).toBe(accountAfter)
        const again = yield* debts.repaid({
          cardId: customer.cardId,
          amountMicros: owedMicros,
          tx: repay.hash,
          at: new Date()
        })
        expect(Option.isNone(again)).toBe(true)
        const [still] = yield* query(
          (sql) =>
            sql<{ entries: number; repayments: number }>`
            SELECT (SELECT count(*)::int FROM card_owed_entries WHERE card_id = ${customer.cardId}) AS entries,
                   (SELECT count(*)::int FROM events WHERE address = ${customer.account.address}
                      AND type = 'money' AND data::jsonb ->> 'change' = 'repaid') AS repayments`
        )
        expect(still).toEqual({ entries: 2, repayments: 1 })
      })
  )

  it.effect(
    "a refill counts the card's open holds, pending clearings and owed amount, within what its allowance still allows",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const debts = yield* CardDebts
        const customer = yield* agentCustomer
        yield* Effect.orDie(mintUsd1(devnet, customer.account.address, parseUnits("80", 18)))
        yield* eventually(
          "the card wallet's balance followed",
          followedUsd1(customer.account.address),
          (seen) => seen === 80
        )
        // A $100 spending allowance on chain, then two card payments: a $30 hold, and a $12 one whose hold expired.
        yield* signAllowance(customer, 100)
        const card = (yield* send("GET", "/me", { headers: bearer(customer.token) })).body.card
        yield* swipe(card, "30.00")
        yield* swipe(card, "12.00")
        yield* query(
          (sql) => sql`UPDATE card_authorizations SET hold_expires_at = '2026-01-01T00:00:00Z'
                       WHERE card_id = ${customer.cardId} AND approved_micros = 12000000`
        )
        // A $20 clearing not yet debited, and $5.50 owed.
        yield* query(
          (
            sql
          ) => sql`INSERT INTO card_network_events (id, transaction_id, card_id, address, kind, amount_micros, money,
                                                       merchant_name, merchant_mcc, merchant_country, created_at)
                       VALUES (${`clearing-${randomUUID()}`}, ${randomUUID()}, ${customer.cardId},
                               ${customer.account.address}, 'clearing', 20000000, 'debit_pending', 'Blue Bottle', '5814',
                               'USA', now())`
        )
        yield* oweClearing(customer, 5_500_000n)

        // The spending history has both card payments, at their approved amounts, marked as card payments.
        const history = (yield* (yield* Statement).payments([customer.account.address], Date.now() - 86_400_000)).get(
          customer.account.address
        )
        expect([...history!].sort((a, b) => a.usd - b.usd)).toEqual([
          { at: expect.any(Number), usd: 12, card: true },
          { at: expect.any(Number), usd: 30, card: true }
        ])

        const committed = (yield* debts.commitments([customer.cardId], Date.now())).get(customer.cardId)
        expect(committed).toEqual({
          heldMicros: 30_000_000n,
          clearedPendingMicros: 20_000_000n,
          owedMicros: 5_500_000n,
          allowanceMicros: 100_000_000n
        })

        // $80 less $30 held and $20 pending keeps $30; the allowance leaves $100 - $50 = $50 for card payments.
        // Before the close on Friday the card needs more than $50: it is topped up to $50, no further, after
        // repaying the $5.50 it owes.
        const preview = (yield* send("GET", `/agent/preview?at=${FRIDAY_1540_ET}`, { headers: bearer(customer.token) }))
          .body
        const { decision } = preview
        expect(decision.needUsd).toBeGreaterThan(50)
        expect(decision).toMatchObject({ action: "refill", rule: "REFILL_BEFORE_CLOSE", repayUsd: 5.5 })
        expect(decision.usd).toBe(ceilCents(5.5 + 50 - 30))
        expect(decision.reason).toContain("The card has $24.50 available ($80.00 of USD1 less $30.00 held")
      })
  )
})

layer(
  testServer(
    {
      AGENT_MODE: "live",
      AGENT_INTERVAL: "1 hour",
      AGENT_POLL: "24 hours",
      AGENT_TX_TIMEOUT: "500 millis",
      AGENT_LEASE: "1 second"
    },
    { kycProvider: ScriptedKycProvider.layer() }
  ),
  { excludeTestServices: true, timeout: "120 seconds" }
)("a repayment the chain does not mine in time", (it) => {
  it.effect(
    "its decision ends unknown; the next decision does not repay again; once mined, the tracker records it once",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const loop = yield* AgentLoop
        const debts = yield* CardDebts
        const customer = yield* agentCustomer
        yield* Effect.orDie(mintUsd1(devnet, customer.account.address, parseUnits("500", 18)))
        // $6.50 owed, paid from the wallet's $25 of cash: a refill that only repays (nothing left to send).
        yield* oweClearing(customer, 6_500_000n)
        const account = debts.settlementAccount
        const accountBefore = yield* balanceOf(devnet.usd1, account)
        const decisions = query(
          (sql) =>
            sql<{ id: string; action: string; status: string; repayMicros: string | null }>`
            SELECT id, action, status, repay_micros FROM agent_decisions WHERE card_id = ${customer.cardId} ORDER BY id`
        )
        const repays = query(
          (sql) =>
            sql<{ status: string }>`
            SELECT t.status FROM agent_transactions t JOIN agent_decisions d ON d.id = t.decision_id
            WHERE d.card_id = ${customer.cardId} AND t.step = 'repay'`
        )

        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        yield* loop.tick(FRIDAY_1540_ET)
        // Not mined within AGENT_TX_TIMEOUT: unknown (at once, or by the reconciler once the lease passed).
        yield* eventually(
          "the repaying decision unknown",
          Effect.zipRight(loop.reconcile, decisions),
          (rows) => rows[0]?.status === "unknown"
        )
        expect(yield* decisions).toEqual([
          { id: expect.any(String), action: "refill", status: "unknown", repayMicros: "6500000" }
        ])
        expect(yield* repays).toEqual([{ status: "broadcast" }])

        // The next decision leaves the repayment in doubt out: the card owes nothing else and holds plenty.
        yield* makeDue(customer.cardId)
        yield* loop.tick(SATURDAY)
        expect((yield* decisions).map((row) => [row.action, row.repayMicros])).toEqual([
          ["refill", "6500000"],
          ["none", null]
        ])
        expect(yield* repays).toHaveLength(1)

        // The chain mines it: the tracker records it with the card program, once.
        yield* devnetRpc(devnet, "evm_setAutomine", [true])
        yield* devnetRpc(devnet, "evm_mine", [])
        // (each pass of the tracker reads what the block watcher caught: under load, one may come early)
        yield* eventually("the repayment recorded", Effect.zipRight(loop.followChain, repays), (rows) => {
          return rows[0]?.status === "succeeded"
        })
        expect(yield* repays).toEqual([{ status: "succeeded" }])
        expect((yield* balanceOf(devnet.usd1, account)) - accountBefore).toBe(6_500_000n * PER_MICRO)
        const [books] = yield* query(
          (sql) =>
            sql<{ owed: string; total: string; repayments: number }>`
            SELECT (SELECT owed_micros::text FROM cards WHERE id = ${customer.cardId}) AS owed,
                   (SELECT sum(amount_micros)::text FROM card_owed_entries WHERE card_id = ${customer.cardId}) AS total,
                   (SELECT count(*)::int FROM events WHERE address = ${customer.account.address}
                      AND type = 'money' AND data::jsonb ->> 'change' = 'repaid') AS repayments`
        )
        expect(books).toEqual({ owed: "0", total: "0", repayments: 1 })
      }).pipe(
        Effect.ensuring(
          Effect.flatMap(TestDevnet, (devnet) => devnetRpc(devnet, "evm_setAutomine", [true]).pipe(Effect.orDie))
        )
      )
  )
})

layer(
  testServer(
    { AGENT_MODE: "live", AGENT_INTERVAL: "1 hour", AGENT_POLL: "24 hours", CARD_SANDBOX_SECRET: NETWORK_SECRET },
    { kycProvider: ScriptedKycProvider.layer() }
  ),
  { excludeTestServices: true, timeout: "120 seconds" }
)("with the settlement engine", (it) => {
  it.effect(
    "allowance revoked, a clearing owed, the card frozen: the agent's refill repays it and the card thaws",
    () =>
      Effect.gen(function* () {
        const devnet = yield* TestDevnet
        const loop = yield* AgentLoop
        const holder = yield* fundedCardHolder("20")
        expect((yield* send("PUT", "/strategy", { headers: bearer(holder.token), json: strategy })).status).toBe(200)
        const { spender } = (yield* allowanceOf(holder.token)) as unknown as { spender: `0x${string}` }
        const authorized = yield* swipe(holder.card, "8.00")
        // The holder revokes the allowance on chain; the clearing that follows cannot be debited.
        yield* revokeOnChain(holder, spender)
        yield* eventually("revoked", allowanceOf(holder.token), (seen) => seen.state === "revoked")
        yield* send("POST", `/sandbox/card-network/authorizations/${authorized.body.id}/clear`, { json: {} })
        const controls = Effect.map(send("GET", "/card/controls", { headers: bearer(holder.token) }), (r) => r.body)
        yield* eventually("the clearing owed", controls, (body) => body.frozenReason === "amount_owed")
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: false, reason: "card_frozen" })
        const programBefore = yield* balanceOf(devnet.usd1, spender)

        // The agent's next refill repays the $8 from its wallet's cash, straight to the settlement account.
        expect((yield* loop.tick(FRIDAY_1540_ET)).executed).toBe(1)
        expect((yield* balanceOf(devnet.usd1, spender)) - programBefore).toBe(parseUnits("8", 18))
        expect(yield* controls).toMatchObject({ frozenReason: null, owedUsd: 0 })
        // Thawed: the next authorization is declined for the revoked allowance only, no longer as frozen.
        expect((yield* swipe(holder.card, "1.00")).body).toMatchObject({ approved: false, reason: "allowance_missing" })
        const [ledger] = yield* query(
          (sql) =>
            sql<{
              total: string
            }>`SELECT sum(amount_micros)::text AS total FROM card_owed_entries WHERE card_id = ${holder.cardId}`
        )
        expect(ledger!.total).toBe("0")
        // The program was paid, by the agent: the card payment is settled.
        const listed = yield* send("GET", "/card/authorizations", { headers: bearer(holder.token) })
        expect(listed.body.find((item: { id: string }) => item.id === authorized.body.id)).toMatchObject({
          status: "settled"
        })
      })
  )
})
