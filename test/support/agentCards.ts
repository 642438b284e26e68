/**
 * Many agent cards at once, for the scale tests and `bench/agent.ts`: `count` users, each with a
 * card and a strategy set (and due at once) at `dueAt`, written by PostgreSQL itself (generate_series) so that 100,000
 * cards take seconds. Card `i` is `bench-<i>`; its holder's address is derived from `i`. Such cards
 * are marked `issuer = 'bench'`; `clearAgentBench` removes them and everything of theirs.
 */
import type { SqlClient } from "@effect/sql"
import { Effect, Redacted } from "effect"
import { encodeAbiParameters, keccak256, numberToHex, parseUnits } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { agentWalletKey } from "../../src/agent/ChainAgentWallet.js"
import { hashOf } from "../../src/agent/Schedule.js"
import type { Devnet } from "../../src/chain/Devnet.js"

/** Cards written per statement. */
const SEED_BATCH = 10_000

/** The id of seeded card `i` (1-based). */
export const seededCardId = (i: number) => `bench-${i}`

export const seedAgentCards = (
  sql: SqlClient.SqlClient,
  count: number,
  dueAt: Date,
  strategy: {
    readonly weeklySpendUsd: number
    /**
     * `derived`: the loop derives each wallet's address from the seed on its first look (as for a
     * new card); `placeholder`: every card has a distinct made-up wallet address already, as after
     * the loop's first look (for dry figures on a chain where those wallets hold nothing anyway).
     */
    readonly wallets?: "derived" | "placeholder"
  } = { weeklySpendUsd: 140 }
) =>
  Effect.forEach(
    // In batches: each statement stays short on a loaded machine (a 100,000-card bench run there
    // once failed with an SqlError whose message was not kept), and the server's work is the same.
    Array.from({ length: Math.ceil(count / SEED_BATCH) }, (_, i) => ({
      from: i * SEED_BATCH + 1,
      to: Math.min(count, (i + 1) * SEED_BATCH)
    })),
    ({ from, to }) =>
      Effect.gen(function* () {
        // Addresses and card ids are derived from the row number: distinct, and the same on every run.
        yield* sql`
          INSERT INTO users (address, created_at)
          SELECT '0x' || md5('bench-user-' || i) || substr(md5('bench-pad-' || i), 1, 8), ${dueAt}
          FROM generate_series(${from}::int, ${to}::int) i`
        yield* sql`
          INSERT INTO cards (id, address, issuer, issuer_ref, holder, number_sealed, cvv_sealed, last4, expiry,
                             document_hash, created_at)
          SELECT 'bench-' || i, '0x' || md5('bench-user-' || i) || substr(md5('bench-pad-' || i), 1, 8), 'bench',
                 'bench-' || i, 'Bench Holder', '\\x00'::bytea, '\\x00'::bytea, '0000', '01/30',
                 decode(md5('bench-doc-' || i) || md5('bench-doc2-' || i), 'hex'), ${dueAt}
          FROM generate_series(${from}::int, ${to}::int) i`
        const hashes = Array.from({ length: to - from + 1 }, (_, k) => hashOf(seededCardId(from + k)))
        yield* sql`
          INSERT INTO agent_strategies (card_id, targets, weekly_spend_usd, time_zone, created_at, updated_at, due_at,
                                        wallet, due_hash)
          SELECT 'bench-' || i, '{"NVDA": 0.5, "SPY": 0.5}'::jsonb, ${strategy.weeklySpendUsd}, 'America/New_York',
                 ${dueAt}, ${dueAt}, ${dueAt},
                 CASE WHEN ${strategy.wallets === "placeholder"} THEN '0x' || md5('bench-wallet-' || i) || substr(md5('bench-wpad-' || i), 1, 8) END,
                 (${hashes}::bigint[])[i - ${from}::int + 1]
          FROM generate_series(${from}::int, ${to}::int) i`
      }),
    { discard: true }
  )

export const clearAgentBench = (sql: SqlClient.SqlClient) =>
  Effect.gen(function* () {
    const bench = sql`SELECT id FROM cards WHERE issuer = 'bench'`
    const benchAddresses = sql`SELECT address FROM cards WHERE issuer = 'bench'`
    yield* sql`DELETE FROM agent_transactions WHERE decision_id IN
                 (SELECT id FROM agent_decisions WHERE card_id IN (${bench}))`
    yield* sql`DELETE FROM agent_decisions WHERE card_id IN (${bench})`
    yield* sql`DELETE FROM agent_strategies WHERE card_id IN (${bench})`
    yield* sql`DELETE FROM agent_pages WHERE card_ids && ARRAY(${bench})`
    // The slices' claims are not any card's: once cleared, the next tick claims every slice afresh.
    yield* sql`DELETE FROM agent_slices`
    yield* sql`DELETE FROM events WHERE address IN (${benchAddresses})`
    yield* sql`DELETE FROM event_sequences WHERE address IN (${benchAddresses})`
    yield* sql`WITH gone AS (DELETE FROM cards WHERE issuer = 'bench' RETURNING address)
               DELETE FROM users WHERE address IN (SELECT address FROM gone)`
  })

/** Mapping slot of `owner` in a Solidity `mapping(address => uint256)` at `slot`. */
const balanceSlot = (owner: `0x${string}`, slot: bigint) =>
  keccak256(encodeAbiParameters([{ type: "address" }, { type: "uint256" }], [owner, slot]))

/** JSON-RPC calls to the devnet, 200 to a batch request. */
const rpcBatch = (url: string, calls: ReadonlyArray<{ method: string; params: ReadonlyArray<unknown> }>) =>
  Effect.forEach(
    Array.from({ length: Math.ceil(calls.length / 200) }, (_, i) => calls.slice(i * 200, (i + 1) * 200)),
    (chunk) =>
      Effect.promise(() =>
        fetch(url, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify(chunk.map((call, id) => ({ jsonrpc: "2.0", id, ...call })))
        }).then((response) => response.json())
      ),
    { discard: true }
  )

/**
 * Gives the agent wallets (keys derived from `seed`) of seeded cards 1..count gas and $25 of USD1 by writing the devnet's
 * state (USD1 is OpenZeppelin's ERC20: balances are the mapping at slot 0), and keeps each wallet's
 * address with its strategy, as the loop would after its first look. Every seeded card's own USD1
 * balance is set to 0.
 */
export const fundAgentWallets = (sql: SqlClient.SqlClient, devnet: Devnet, seed: string, count: number) =>
  Effect.gen(function* () {
    const wallets = Array.from(
      { length: count },
      (_, i) => privateKeyToAccount(Redacted.value(agentWalletKey(Redacted.make(seed), seededCardId(i + 1)))).address
    )
    const usd1 = numberToHex(parseUnits("25", 18), { size: 32 })
    const cards = yield* sql<{ address: `0x${string}` }>`SELECT address FROM cards WHERE issuer = 'bench'`
    yield* rpcBatch(devnet.rpcUrl, [
      // A card an earlier run refilled starts empty again.
      ...cards.map(({ address }) => ({
        method: "anvil_setStorageAt",
        params: [devnet.usd1, balanceSlot(address, 0n), numberToHex(0n, { size: 32 })]
      })),
      ...wallets.map((wallet) => ({ method: "anvil_setBalance", params: [wallet, "0xde0b6b3a7640000"] })),
      ...wallets.map((wallet) => ({
        method: "anvil_setStorageAt",
        params: [devnet.usd1, balanceSlot(wallet, 0n), usd1]
      }))
    ])
    yield* sql`
      UPDATE agent_strategies s SET wallet = w.wallet
      FROM (SELECT unnest(${wallets.map((_, i) => seededCardId(i + 1))}::text[]) AS card_id,
                   unnest(${wallets}::text[]) AS wallet) w
      WHERE s.card_id = w.card_id`
    return wallets
  })
