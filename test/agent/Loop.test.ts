/**
 * The agent loop in one process on the real devnet: a live refill sells on the exchange and sends
 * USD1 to the card, exactly as decided; dry mode sends nothing; idle cards write nothing new.
 * Ticks are run by the test (the scheduled loop waits an hour), deciding at a fixed instant.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { createPublicClient, erc20Abi, formatUnits, http, parseUnits } from "viem"
import { AgentLoop } from "../../src/agent/AgentLoop.js"
import { ChainAgentWallet } from "../../src/agent/ChainAgentWallet.js"
import { ScriptedAgentWallet } from "../../src/agent/ScriptedAgentWallet.js"
import { PriceFeedArtifact } from "../../src/chain/contracts/artifacts.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { cardHolder } from "../support/agent.js"
import { bearer, send } from "../support/http.js"
import { TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"

/** Friday 2026-11-20 15:40 ET: the regular session's last half hour. */
const FRIDAY_1540_ET = Date.parse("2026-11-20T20:40:00Z")
const strategy = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 140 }

const reader = Effect.map(TestDevnet, (devnet) => createPublicClient({ transport: http(devnet.rpcUrl) }))

const balanceOf = (token: `0x${string}`, owner: `0x${string}`) =>
  Effect.flatMap(reader, (client) =>
    Effect.promise(() =>
      client.readContract({ address: token, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
    )
  )

const nonceOf = (address: `0x${string}`) =>
  Effect.flatMap(reader, (client) => Effect.promise(() => client.getTransactionCount({ address })))

const decisionsOf = (cardId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql<{ id: string; action: string; status: string; usd: number | null; symbol: string | null }>`
      SELECT id, action, status, usd, symbol FROM agent_decisions WHERE card_id = ${cardId} ORDER BY id`
  ).pipe(Effect.orDie)

/**
 * Makes the card due for the next tick. A second back: the tick claims what is due when it starts,
 * by the process clock in milliseconds, while `now()` has microseconds, so a card made due "now"
 * could fall due a fraction of a millisecond after a tick started in the same millisecond.
 */
const makeDue = (cardId: string) =>
  Effect.flatMap(
    SqlClient.SqlClient,
    (sql) => sql`UPDATE agent_strategies SET due_at = now() - interval '1 second' WHERE card_id = ${cardId}`
  ).pipe(Effect.orDie)

/** A card holder with a strategy and a funded agent wallet; answers them and the wallet's address. */
const agentCustomer = Effect.gen(function* () {
  const holder = yield* cardHolder()
  expect((yield* send("PUT", "/strategy", { headers: bearer(holder.token), json: strategy })).status).toBe(200)
  const portfolio = (yield* send("GET", "/portfolio", { headers: bearer(holder.token) })).body
  return { ...holder, wallet: portfolio.wallet as `0x${string}`, portfolio }
})

// The loop looks for due cards once, at start: the tests tick it themselves at the hours they name, and
// a loop tick deciding a card at the real hour would be a decision of its own.
const server = (mode: "dry" | "live") =>
  testServer(
    { AGENT_MODE: mode, AGENT_INTERVAL: "1 hour", AGENT_POLL: "24 hours" },
    { kycProvider: ScriptedKycProvider.layer() }
  )

layer(server("live"), { excludeTestServices: true, timeout: "90 seconds" })("live on the devnet", (it) => {
  it.effect("a card below its need is refilled in one tick: the exchange's approval, sale, then send, as decided", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const loop = yield* AgentLoop
      const customer = yield* agentCustomer
      expect(customer.portfolio.totalUsd).toBeGreaterThan(900)
      const cardBefore = yield* balanceOf(devnet.usd1, customer.account.address)
      expect(cardBefore).toBe(0n)

      const summary = yield* loop.tick(FRIDAY_1540_ET)
      expect(summary.executed).toBe(1)
      const [decision] = yield* decisionsOf(customer.cardId)
      expect(decision).toMatchObject({ action: "refill", status: "executed" })
      const sold = devnet.stocks.find((stock) => stock.symbol === decision!.symbol)!

      const log = (yield* send("GET", "/agent/decisions", { headers: bearer(customer.token) })).body
      expect(log).toHaveLength(1)
      expect(log[0]).toMatchObject({ id: decision!.id, action: "refill", status: "executed", error: null })
      // The wallet's first trade of the token approved the exchange first: one of the trade's transactions.
      expect(log[0].txs).toHaveLength(3)
      const [approveTx, saleTx, sendTx] = log[0].txs as Array<`0x${string}`>

      // The card received exactly the decided amount; the wallet gave up exactly what it sold.
      const usd = parseUnits(decision!.usd!.toFixed(2), 18)
      expect(yield* balanceOf(devnet.usd1, customer.account.address)).toBe(usd)
      const sql = yield* SqlClient.SqlClient
      const [sale] = yield* sql<{ amount: string }>`
        SELECT amount FROM agent_transactions WHERE decision_id = ${decision!.id} AND step = 'sell'`.pipe(Effect.orDie)
      const heldBefore = customer.portfolio.holdings.find((h: { symbol: string }) => h.symbol === sold.symbol)
      expect(yield* balanceOf(sold.address, customer.wallet)).toBe(
        parseUnits(heldBefore.balance, 18) - BigInt(sale!.amount)
      )
      const client = yield* reader
      const receipts = yield* Effect.promise(() =>
        Promise.all([approveTx, saleTx, sendTx].map((hash) => client.getTransactionReceipt({ hash: hash! })))
      )
      expect(receipts.map((receipt) => receipt.status)).toEqual(["success", "success", "success"])

      // The statement shows the refill first.
      const statement = (yield* send("GET", "/me/activity", { headers: bearer(customer.token) })).body
      expect(statement[0]).toMatchObject({
        id: `refill-${decision!.id}`,
        type: "refill",
        usd: decision!.usd,
        tx: sendTx,
        description: `Agent refill: sold ${sold.symbol}`
      })

      // The next interval is in the cooldown: no second trade, and no second transfer.
      yield* makeDue(customer.cardId)
      yield* loop.tick(FRIDAY_1540_ET + 60_000)
      expect(yield* balanceOf(devnet.usd1, customer.account.address)).toBe(usd)
    })
  )
})

layer(server("dry"), { excludeTestServices: true, timeout: "90 seconds" })("dry on the devnet", (it) => {
  it.effect("the same refill is stored as dry-run and nothing is sent", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const loop = yield* AgentLoop
      const customer = yield* agentCustomer
      const nonce = yield* nonceOf(customer.wallet)
      yield* loop.tick(FRIDAY_1540_ET)
      const [decision] = yield* decisionsOf(customer.cardId)
      expect(decision).toMatchObject({ action: "refill", status: "dry-run" })
      expect(yield* nonceOf(customer.wallet)).toBe(nonce)
      expect(yield* balanceOf(devnet.usd1, customer.account.address)).toBe(0n)
    })
  )

  it.effect("the portfolio is the chain's balances at the feeds' prices, with the market's own data", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const client = yield* reader
      const customer = yield* agentCustomer
      yield* mintUsd1(devnet, customer.account.address, parseUnits("7.25", 18))
      const portfolio = (yield* send("GET", "/portfolio", { headers: bearer(customer.token) })).body
      expect(portfolio.card).toEqual({ address: customer.account.address, usd1: 7.25 })
      for (const holding of portfolio.holdings) {
        if (holding.symbol === "USD1") {
          const cash = yield* balanceOf(devnet.usd1, customer.wallet)
          expect(holding.balance).toBe(formatUnits(cash, 18))
          expect(holding.valueUsd).toBe(Number(formatUnits(cash, 18)))
          expect(holding.market).toBeNull()
          continue
        }
        const stock = devnet.stocks.find((s) => s.symbol === holding.symbol)!
        const onChain = yield* balanceOf(stock.address, customer.wallet)
        const [, answer] = yield* Effect.promise(() =>
          client.readContract({ address: stock.feed, abi: PriceFeedArtifact.abi, functionName: "latestRoundData" })
        )
        const price = Number(formatUnits(answer, 8))
        expect(holding.balance).toBe(formatUnits(onChain, 18))
        expect(holding.valueUsd).toBeCloseTo(Number(formatUnits(onChain, 18)) * price, 9)
        expect(holding.target).toBe(strategy.targets[holding.symbol as keyof typeof strategy.targets] ?? 0)
        const market = (yield* send("GET", `/market/tokens/${holding.symbol}`)).body.market
        expect(holding.market).toEqual(market)
      }
      const weights = portfolio.holdings.reduce((sum: number, h: { weight: number }) => sum + h.weight, 0)
      expect(Math.abs(weights - 1)).toBeLessThan(1e-9)
      expect(portfolio.totalUsd).toBeCloseTo(
        portfolio.holdings.reduce((sum: number, h: { valueUsd: number }) => sum + h.valueUsd, 0),
        9
      )
    })
  )

  it.effect("idle cards write a logged decision once, then nothing while nothing changes", () =>
    Effect.gen(function* () {
      const loop = yield* AgentLoop
      const devnet = yield* TestDevnet
      const holder = yield* cardHolder()
      // The funded wallet holds the five tokens in equal parts, as this strategy wants.
      const even = { targets: { NVDA: 0.2, TSLA: 0.2, AAPL: 0.2, MSFT: 0.2, SPY: 0.2 }, weeklySpendUsd: 140 }
      expect((yield* send("PUT", "/strategy", { headers: bearer(holder.token), json: even })).status).toBe(200)
      const customer = holder
      // Enough on the card for the weekend: nothing to do.
      yield* mintUsd1(devnet, customer.account.address, parseUnits("500", 18))
      for (const minutes of [0, 1, 2]) {
        yield* makeDue(customer.cardId)
        yield* loop.tick(FRIDAY_1540_ET + minutes * 60_000)
      }
      const decisions = yield* decisionsOf(customer.cardId)
      expect(decisions.map((d) => [d.action, d.status])).toEqual([["none", "logged"]])
    })
  )
})

layer(
  testServer(
    { AGENT_MODE: "live", AGENT_INTERVAL: "1 hour" },
    {
      chain: InMemoryChain.layer(),
      kycProvider: ScriptedKycProvider.layer(),
      agentWallet: ScriptedAgentWallet.around(ChainAgentWallet)
    }
  ),
  { excludeTestServices: true }
)("a wallet that needs a sign-in for one card", (it) => {
  it.effect("blocks that card's decision while the other cards are refilled in the same tick", () =>
    Effect.gen(function* () {
      const chain = yield* InMemoryChain
      const wallet = yield* ScriptedAgentWallet
      const loop = yield* AgentLoop
      // Below the $10 floor with $25 of wallet cash: a cash refill, whatever the hour.
      const cashRefill = { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 0 }
      const holders = [yield* cardHolder("One"), yield* cardHolder("Two"), yield* cardHolder("Three")]
      for (const holder of holders) {
        expect((yield* send("PUT", "/strategy", { headers: bearer(holder.token), json: cashRefill })).status).toBe(200)
      }
      yield* wallet.failWith(holders[1]!.cardId, Option.some("SESSION_EXPIRED"))

      const summary = yield* loop.tick()
      expect(summary).toMatchObject({ claimed: 3, executed: 2 })
      const statuses = yield* Effect.forEach(holders, (holder) =>
        send("GET", "/agent/decisions", { headers: bearer(holder.token) }).pipe(Effect.map((r) => r.body[0]))
      )
      expect(statuses.map((d) => d.status)).toEqual(["executed", "blocked", "executed"])
      expect(statuses[1].error).toContain("SESSION_EXPIRED")
      for (const [i, holder] of holders.entries()) {
        expect(yield* chain.balanceOf(chain.usd1.address, holder.account.address)).toBe(
          i === 1 ? 0n : parseUnits("10", 18)
        )
      }
    })
  )
})
