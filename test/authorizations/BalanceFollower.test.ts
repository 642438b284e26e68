/**
 * The card balance follower (src/authorizations/BalanceFollower.ts):
 *
 * - on the real devnet, the loop as the service runs it (every 100 ms here): a card wallet's outside
 *   transfers, in and out, reach `card_wallet_balances`; a wallet that is no card's is never
 *   stored; the chain going back (`evm_revert`) makes it read every card wallet again at the lower
 *   head; the transfer parties of a range of blocks;
 * - on the in-memory chain, ticks run by the test: mints, the faucet, transfers and a new card;
 * - its pure rules, and the ranges of blocks one `eth_getLogs` call asks for.
 */
import { createHash, randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { describe, expect, it, layer } from "@effect/vitest"
import { ConfigProvider, Duration, Effect, Layer, Option, Redacted } from "effect"
import { erc20Abi, getAddress, type Hex, parseUnits, toHex } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import {
  BalanceFollowerLive,
  balanceFollower,
  type FollowerRow,
  MAX_FOLLOWED_BLOCKS,
  nextStep,
  storedForms
} from "../../src/authorizations/BalanceFollower.js"
import { chainCardProgram } from "../../src/cards/ChainCardProgram.js"
import type { Address } from "../../src/chain/Address.js"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { ANVIL_ACCOUNT_KEYS, awaitReceipt, publicClientFor, walletClientFor } from "../../src/chain/Devnet.js"
import { blockRanges, LOG_BLOCKS_PER_CALL } from "../../src/chain/EvmChain.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { usd1OnChain } from "../support/cards.js"
import { devnetRpc, TestChain, TestDevnet } from "../support/TestChain.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const units = (amount: string) => parseUnits(amount, 18)
const randomAddress = (): Address => getAddress(toHex(randomBytes(20)))

/** A user and a card of `address`: the columns the follower reads, the others filled as issuance would. */
const insertCard = (address: Address) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const id = `card-${address.slice(2, 14).toLowerCase()}`
    const documentHash = createHash("sha256").update(address).digest()
    yield* sql`INSERT INTO users (address, created_at) VALUES (${address}, now())`
    yield* sql`
      INSERT INTO cards (id, address, issuer, issuer_ref, holder, number_sealed, cvv_sealed, last4, expiry,
                         document_hash, created_at)
      VALUES (${id}, ${address}, 'test', ${id}, 'Test Holder', '\\x00'::bytea, '\\x00'::bytea, '0000', '01/30',
              ${documentHash}, now())`
  }).pipe(Effect.orDie)

/** The balance stored for `address`, if any. */
const storedBalance = (address: Address) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly usd1: string; readonly block: string }>`
      SELECT usd1::text AS usd1, block FROM card_wallet_balances WHERE address = ${address}`.pipe(
      Effect.map((rows) =>
        Option.map(Option.fromNullable(rows[0]), (row) => ({ usd1: BigInt(row.usd1), block: BigInt(row.block) }))
      )
    )
  ).pipe(Effect.orDie)

/** The follower row's block, if there is a row. */
const followerBlock = Effect.flatMap(SqlClient.SqlClient, (sql) =>
  sql<{ readonly block: string }>`SELECT block FROM card_balance_follower`.pipe(
    Effect.map((rows) => Option.map(Option.fromNullable(rows[0]), (row) => BigInt(row.block)))
  )
).pipe(Effect.orDie)

const withSettings = (settings: Record<string, string>) =>
  Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(settings))))

// -------------------------------------------------------------------------------------------------
// On the devnet

/** A plain ERC-20 transfer of USD1 signed by `key`, straight to the devnet (not through the service); its block. */
const outsideTransfer = (key: Hex, to: Address, amount: bigint) =>
  Effect.gen(function* () {
    const devnet = yield* TestDevnet
    const hash = yield* Effect.promise(() =>
      walletClientFor(devnet, key).writeContract({
        address: devnet.usd1,
        abi: erc20Abi,
        functionName: "transfer",
        args: [to, amount]
      })
    )
    return (yield* awaitReceipt(devnet, hash, "the outside transfer").pipe(Effect.orDie)).blockNumber
  })

const chainHead = Effect.flatMap(TestDevnet, (devnet) => Effect.promise(() => publicClientFor(devnet).getBlockNumber()))

/** Waits for the stored balance of `address` to be `usd1`, stored for block `atLeast` or later. */
const storedEventually = (what: string, address: Address, usd1: bigint, atLeast = 0n) =>
  eventually(what, storedBalance(address), (stored) =>
    Option.exists(stored, (balance) => balance.usd1 === usd1 && balance.block >= atLeast)
  )

const holderKey = ANVIL_ACCOUNT_KEYS[3]!
const holder = privateKeyToAccount(holderKey).address
/** An outsider with USD1 and gas: the devnet's account 4. */
const outsiderKey = ANVIL_ACCOUNT_KEYS[4]!
const outsider = privateKeyToAccount(outsiderKey).address

/** The card program's settlement account: a fresh key's, given gas by the chain's faucet. */
const TestCardProgram = chainCardProgram(Redacted.make(generatePrivateKey()))

const DevnetFollower = BalanceFollowerLive.pipe(
  Layer.provide(TestCardProgram),
  Layer.provideMerge(Layer.merge(TestChain, TestDatabase)),
  Layer.provide(withSettings({ CARD_BALANCE_POLL: "100 millis" }))
)

layer(DevnetFollower, { excludeTestServices: true, timeout: "120 seconds" })("on the devnet", (it) => {
  it.effect("a card wallet's outside transfers in and out are in its stored balance, up to the head", () =>
    Effect.gen(function* () {
      yield* insertCard(holder)
      const start = yield* usd1OnChain(holder)
      expect(start).toBeGreaterThan(0n)
      yield* storedEventually("the new card's balance", holder, start)

      const received = yield* outsideTransfer(outsiderKey, holder, units("25"))
      yield* storedEventually("the USD1 received", holder, start + units("25"), received)

      const sent = yield* outsideTransfer(holderKey, randomAddress(), units("7.5"))
      yield* storedEventually("the USD1 sent", holder, start + units("17.5"), sent)
      expect(yield* usd1OnChain(holder)).toBe(start + units("17.5"))

      const head = yield* chainHead
      yield* eventually("the follower at the chain's head", followerBlock, (block) =>
        Option.exists(block, (followed) => followed === head)
      )
    })
  )

  it.effect("a wallet that is no card's is never stored, nor the other party of a card's transfer", () =>
    Effect.gen(function* () {
      const stranger = randomAddress()
      const paid = yield* outsideTransfer(outsiderKey, stranger, units("3"))
      yield* eventually("the follower past the stranger's block", followerBlock, (block) =>
        Option.exists(block, (followed) => followed >= paid)
      )
      expect(yield* storedBalance(stranger)).toEqual(Option.none())
      expect(yield* storedBalance(outsider)).toEqual(Option.none())
    })
  )

  it.effect("the transfer parties of a range of blocks: each address once, none from blocks without transfers", () =>
    Effect.gen(function* () {
      const chain = yield* ChainClient
      const devnet = yield* TestDevnet
      const [first, second] = [randomAddress(), randomAddress()]
      const before = yield* outsideTransfer(outsiderKey, first, units("1"))
      // 2,000 blocks take anvil about 30 s here: ranges wider than one call are the pure test's
      yield* devnetRpc(devnet, "anvil_mine", [toHex(3)])
      const after = yield* outsideTransfer(outsiderKey, second, units("1"))

      const parties = yield* chain.usd1Parties(before, after)
      expect(new Set(parties)).toEqual(new Set([outsider, first, second]))
      expect(yield* chain.usd1Parties(before + 1n, after - 1n)).toEqual([])
    })
  )

  it.effect("the chain going back: every card wallet is read again at the lower head", () =>
    Effect.gen(function* () {
      const devnet = yield* TestDevnet
      const start = yield* usd1OnChain(holder)
      yield* storedEventually("the card's balance before", holder, start)
      const snapshot = (yield* devnetRpc(devnet, "evm_snapshot")) as { readonly result: Hex }

      const lost = yield* outsideTransfer(outsiderKey, holder, units("100"))
      yield* storedEventually("the USD1 of the block to be lost", holder, start + units("100"), lost)
      yield* eventually("the follower at the lost block", followerBlock, (block) =>
        Option.exists(block, (followed) => followed >= lost)
      )

      const reverted = (yield* devnetRpc(devnet, "evm_revert", [snapshot.result])) as { readonly result: boolean }
      expect(reverted.result).toBe(true)
      const head = yield* chainHead
      expect(head).toBeLessThan(lost)
      yield* storedEventually("the card's balance of before the lost block", holder, start)
      expect(yield* storedBalance(holder)).toEqual(Option.some({ usd1: start, block: head }))
      yield* eventually("the follower moved back to the head", followerBlock, (block) =>
        Option.exists(block, (followed) => followed === head)
      )
    })
  )
})

// -------------------------------------------------------------------------------------------------
// On the in-memory chain, ticks run by the test

layer(TestCardProgram.pipe(Layer.provideMerge(Layer.merge(InMemoryChain.layer(), TestDatabase))), {
  excludeTestServices: true
})("on the in-memory chain", (it) => {
  it.effect("ticks follow mints, the faucet, transfers and a card issued later; no other wallet is stored", () =>
    Effect.gen(function* () {
      const chain = yield* InMemoryChain
      const client = yield* ChainClient
      const { tick } = yield* balanceFollower
      const key = generatePrivateKey()
      const cardWallet = privateKeyToAccount(key).address
      yield* insertCard(cardWallet)
      yield* chain.mint(chain.usd1.address, cardWallet, units("20"))

      yield* tick
      const head = (yield* client.watchedHead).number
      expect(yield* storedBalance(cardWallet)).toEqual(Option.some({ usd1: units("20"), block: head }))
      expect(yield* followerBlock).toEqual(Option.some(head))

      const stranger = randomAddress()
      yield* client.account(Redacted.make(key)).transferUsd1(stranger, units("5"), () => Effect.void)
      yield* Option.getOrThrow(client.faucet).fund(cardWallet, { usd1: units("2"), tokens: [] })
      yield* tick
      const followed = (yield* client.watchedHead).number
      expect(followed).toBe(head + 2n)
      expect(yield* storedBalance(cardWallet)).toEqual(Option.some({ usd1: units("17"), block: followed }))
      expect(yield* storedBalance(stranger)).toEqual(Option.none())
      expect(yield* followerBlock).toEqual(Option.some(followed))

      // USD1 before the card: no transfer to follow once it is a card's, read as a new card's.
      const later = randomAddress()
      yield* chain.mint(chain.usd1.address, later, units("3"))
      yield* tick
      expect(yield* storedBalance(later)).toEqual(Option.none())
      yield* insertCard(later)
      yield* tick
      expect(yield* storedBalance(later)).toEqual(
        Option.some({ usd1: units("3"), block: (yield* client.watchedHead).number })
      )
    })
  )
})

// -------------------------------------------------------------------------------------------------
// Pure rules

describe("the blocks of one eth_getLogs call", () => {
  it("a range in consecutive ranges of at most the size, both ends included", () => {
    expect(blockRanges(1n, 4_500n, LOG_BLOCKS_PER_CALL)).toEqual([
      [1n, 2_000n],
      [2_001n, 4_000n],
      [4_001n, 4_500n]
    ])
    expect(blockRanges(7n, 7n, LOG_BLOCKS_PER_CALL)).toEqual([[7n, 7n]])
    expect(blockRanges(1n, 4_000n, 2_000n)).toEqual([
      [1n, 2_000n],
      [2_001n, 4_000n]
    ])
    expect(blockRanges(8n, 7n, LOG_BLOCKS_PER_CALL)).toEqual([])
  })
})

describe("what a tick does", () => {
  const now = Date.parse("2026-12-01T12:00:00Z")
  const refreshEvery = Duration.minutes(1)
  const row = (block: bigint, checkedAgoMs = 1_000, refreshedAgoMs = 10_000): Option.Option<FollowerRow> =>
    Option.some({ block, checkedAt: new Date(now - checkedAgoMs), refreshedAt: new Date(now - refreshedAgoMs) })
  const step = (head: bigint, followed: Option.Option<FollowerRow>, previousHead = Option.none<bigint>()) =>
    nextStep({ head, row: followed, previousHead, now, refreshEvery })

  it("no row yet: every card wallet is read", () => {
    expect(step(100n, Option.none())).toEqual({ _tag: "Refresh", reason: "start" })
  })

  it("a head at or past the row's block: the blocks after the row's are followed", () => {
    expect(step(105n, row(100n))).toEqual({ _tag: "Follow", from: 100n, refreshDue: false })
    expect(step(100n, row(100n))).toEqual({ _tag: "Follow", from: 100n, refreshDue: false })
  })

  it("CARD_BALANCE_REFRESH since the last full read: one is due (a replica takes it)", () => {
    expect(step(105n, row(100n, 1_000, 60_000))).toEqual({ _tag: "Follow", from: 100n, refreshDue: true })
    expect(step(105n, row(100n, 1_000, 59_999))).toEqual({ _tag: "Follow", from: 100n, refreshDue: false })
  })

  it("more blocks to follow than MAX_FOLLOWED_BLOCKS: every card wallet is read", () => {
    expect(step(100n + MAX_FOLLOWED_BLOCKS, row(100n))._tag).toBe("Follow")
    expect(step(101n + MAX_FOLLOWED_BLOCKS, row(100n))).toEqual({ _tag: "Refresh", reason: "behind" })
  })

  it("a head below the row's: another replica ahead, unless this one's head went back or nobody checks", () => {
    expect(step(99n, row(100n))).toEqual({ _tag: "Wait" })
    expect(step(99n, row(100n), Option.some(99n))).toEqual({ _tag: "Wait" })
    expect(step(99n, row(100n), Option.some(100n))).toEqual({ _tag: "Refresh", reason: "went-back" })
    expect(step(99n, row(100n, 60_000))).toEqual({ _tag: "Refresh", reason: "went-back" })
  })

  it("a party's address is looked up in both forms cards are stored in", () => {
    const party = getAddress("0x52908400098527886e0f7030069857d2e4169ee7")
    expect(storedForms([party])).toEqual([party, "0x52908400098527886e0f7030069857d2e4169ee7"])
  })
})
