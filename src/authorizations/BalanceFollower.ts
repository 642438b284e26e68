/**
 * The card wallets' USD1 balances, and what each allows the card program's settlement account (the
 * spending allowance), kept current per block in `card_wallet_balances`, so that an authorization
 * decides from the database and makes no JSON-RPC call of its own
 * (docs/cards.md, "The card wallet's balance").
 *
 * Each tick (CARD_BALANCE_POLL) takes the head the block watcher last polled and the follower's
 * one row (`card_balance_follower`): the blocks after the row's are followed (the card wallets that
 * sent or received USD1 in them, and new cards without a balance yet, are read in one multicall and
 * stored with the row in one statement), or every card wallet is read again, page by page (at start,
 * every CARD_BALANCE_REFRESH, when far behind, or when the chain went back).
 *
 * Replicas run the same loop on one database. Every write is idempotent and moves forward: a
 * balance is replaced only by one read at a later block (a full read: at the same block or later),
 * the row's block only rises. The one exception is a chain that went back (a reorg that shortened
 * it, a node restored from an older state): the balances of blocks that are gone are overwritten,
 * and the row's block moves back to the head.
 */
import { SqlClient } from "@effect/sql"
import { Clock, Duration, Effect, Option, Ref, Schema } from "effect"
import { CardProgram } from "../cards/CardProgram.js"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { backgroundLoop } from "../lifecycle/BackgroundLoop.js"
import { countBalanceRefresh, setBalanceFollower } from "../observability/Metrics.js"
import { balanceSettings } from "./BalanceSettings.js"

// -------------------------------------------------------------------------------------------------
// Pure rules

const FollowerRow = Schema.Struct({
  /** The block the balances are followed to. */
  block: Schema.BigInt,
  checkedAt: Schema.DateFromSelf,
  /** When every card wallet was last read (or a replica took that read). */
  refreshedAt: Schema.DateFromSelf
})
export type FollowerRow = typeof FollowerRow.Type

/**
 * Why every card wallet is read: no row yet (`start`), CARD_BALANCE_REFRESH passed (`schedule`),
 * more blocks to follow than reading every wallet costs (`behind`), or the chain's head below the
 * row's block (`went-back`).
 */
export type RefreshReason = "start" | "schedule" | "behind" | "went-back"

export type Step =
  /**
   * Read the parties of the blocks after `from` up to the head, and new cards without a balance;
   * or, when `refreshDue` and no other replica took it first, every card wallet.
   */
  | { readonly _tag: "Follow"; readonly from: bigint; readonly refreshDue: boolean }
  | { readonly _tag: "Refresh"; readonly reason: Exclude<RefreshReason, "schedule"> }
  /** Another replica followed past this one's head: nothing to do until this one's head catches up. */
  | { readonly _tag: "Wait" }

/**
 * More blocks than this to follow (over 5 `eth_getLogs`), and every card wallet is read instead: a
 * full read costs the same however many blocks were missed (a follower stopped for long).
 */
export const MAX_FOLLOWED_BLOCKS = 10_000n

/**
 * What a tick does, from the head it polled and the row. A head below the row's block is a chain
 * that went back when this replica's own head went back since its previous tick, or when nobody
 * checked the row for CARD_BALANCE_REFRESH; otherwise it is a replica ahead of this one (its
 * watcher polled later), which is no reason to read everything again.
 */
export const nextStep = (input: {
  readonly head: bigint
  readonly row: Option.Option<FollowerRow>
  /** The head this replica polled at its previous tick. */
  readonly previousHead: Option.Option<bigint>
  readonly now: number
  readonly refreshEvery: Duration.Duration
}): Step => {
  if (Option.isNone(input.row)) return { _tag: "Refresh", reason: "start" }
  const { block, checkedAt, refreshedAt } = input.row.value
  const due = (since: Date) => input.now - since.getTime() >= Duration.toMillis(input.refreshEvery)
  if (input.head < block) {
    const wentBack = Option.exists(input.previousHead, (previous) => previous > input.head) || due(checkedAt)
    return wentBack ? { _tag: "Refresh", reason: "went-back" } : { _tag: "Wait" }
  }
  if (input.head - block > MAX_FOLLOWED_BLOCKS) return { _tag: "Refresh", reason: "behind" }
  return { _tag: "Follow", from: block, refreshDue: due(refreshedAt) }
}

/**
 * The forms a party's address may have in `cards.address`: EIP-55 as the API stores it, lower case
 * as bulk-seeded cards (the benches) have it. Both are looked up, each through the unique index.
 */
export const storedForms = (parties: ReadonlyArray<Address>): ReadonlyArray<string> =>
  parties.flatMap((party) => [party, party.toLowerCase()])

// -------------------------------------------------------------------------------------------------
// The follower

/** Card wallets per page of a full read: one multicall (`balanceOf` and `allowance`) per 250 of them. */
const PAGE = 500

/** Which stored balances a new read replaces: those read at an older block, at this block or older, or any. */
type Replaces = "older" | "same-or-older" | "any"
const replacesWhere: Record<Replaces, string> = {
  older: "stored.block < excluded.block",
  "same-or-older": "stored.block <= excluded.block",
  any: "true"
}

/** What the follower's row says after a write: for the metrics. */
const FollowerView = Schema.Struct({ block: Schema.BigInt, checkedAt: Schema.DateFromSelf })

/** The follower's tick, on the `ChainClient` and the database; `BalanceFollowerLive` runs it. */
export const balanceFollower = Effect.gen(function* () {
  const chain = yield* ChainClient
  const program = yield* CardProgram
  const sql = yield* SqlClient.SqlClient
  const { refresh: refreshEvery } = yield* balanceSettings
  const previousHead = yield* Ref.make(Option.none<bigint>())

  const followerRow = sql`SELECT block, checked_at, refreshed_at FROM card_balance_follower`.pipe(
    Effect.flatMap(Schema.decodeUnknown(Schema.Array(FollowerRow))),
    Effect.map((rows) => Option.fromNullable(rows[0]))
  )

  const showView = (rows: ReadonlyArray<unknown>) =>
    Effect.flatMap(Schema.decodeUnknown(Schema.Array(FollowerView))(rows), (views) =>
      views[0] === undefined ? Effect.void : setBalanceFollower(views[0].block, views[0].checkedAt)
    )

  /**
   * The USD1 of `wallets` and what each allows the card program's settlement account, read at the
   * chain's latest block: one multicall per 250 wallets.
   */
  const positionsOf = (wallets: ReadonlyArray<Address>) =>
    wallets.length === 0
      ? Effect.succeed([])
      : Effect.map(chain.usd1Positions(wallets, program.address), (rows) =>
          wallets.map((address, i) => ({ address, ...rows[i]! }))
        )

  /**
   * Stores positions read once `head` was mined, over those `replaces` says (`stored`), and marks the
   * submitted spending allowances the token now allows in full as seen on chain (`seen`): CTEs of
   * the caller's statement.
   */
  const storePositions = (
    positions: ReadonlyArray<{ readonly address: string; readonly usd1: bigint; readonly allowance: bigint }>,
    head: bigint,
    at: Date,
    replaces: Replaces
  ) => {
    const read = sql`unnest(${positions.map(({ address }) => address)}::text[],
      ${positions.map(({ usd1 }) => usd1.toString())}::numeric[],
      ${positions.map(({ allowance }) => allowance.toString())}::numeric[]) AS read (address, usd1, allowance)`
    return sql`
      stored AS (
        INSERT INTO card_wallet_balances AS stored (address, usd1, allowance, block, updated_at)
        SELECT address, usd1, allowance, ${head}::bigint, ${at}::timestamptz FROM ${read}
        ON CONFLICT (address) DO UPDATE SET usd1 = excluded.usd1, allowance = excluded.allowance,
          block = excluded.block, updated_at = excluded.updated_at
        WHERE ${sql.literal(replacesWhere[replaces])}
      ),
      seen AS (
        UPDATE card_allowances a SET seen_at = ${at}
        FROM ${read}
        WHERE a.owner = read.address AND a.submitted_at IS NOT NULL AND a.seen_at IS NULL
          AND lower(a.spender) = lower(${program.address}) AND read.allowance >= a.cap
      )`
  }

  /**
   * The card wallets among `parties`, and up to a page of new cards without a balance yet. A card is
   * new for two CARD_BALANCE_REFRESH: an older one was there when a full read started, which read it
   * (or, if that read failed, the next one will); many new cards at once, as a bulk import, are
   * read by the next full read. Looking only at new cards keeps a tick from comparing every card
   * with every balance (over 100 ms with 100,000 cards).
   */
  const walletsToRead = (parties: ReadonlyArray<Address>, at: Date) =>
    sql<{ readonly address: Address }>`
      SELECT address FROM cards WHERE address = ANY(${storedForms(parties)}::text[])
      UNION
      (SELECT address FROM cards c
       WHERE c.created_at >= ${new Date(at.getTime() - 2 * Duration.toMillis(refreshEvery))}
         AND NOT EXISTS (SELECT FROM card_wallet_balances b WHERE b.address = c.address)
       LIMIT ${PAGE})`

  /**
   * The blocks after `from` up to `head`: the wallets that may have changed read, stored in one
   * statement with the row moved to the head (never back) and checked now.
   */
  const follow = (from: bigint, head: bigint, at: Date) =>
    Effect.gen(function* () {
      const parties = from < head ? yield* chain.usd1Parties(from + 1n, head) : []
      const wallets = (yield* walletsToRead(parties, at)).map(({ address }) => address)
      const positions = yield* positionsOf(wallets)
      yield* showView(
        yield* sql`
          WITH ${storePositions(positions, head, at, "older")}
          UPDATE card_balance_follower
          SET block = GREATEST(block, ${head}::bigint), checked_at = GREATEST(checked_at, ${at}::timestamptz)
          RETURNING block, checked_at`
      )
    })

  /**
   * Takes the scheduled full read for this replica: false when another replica took it since this
   * one read the row. Taken, it is not taken again for CARD_BALANCE_REFRESH, even if it fails.
   */
  const takeScheduledRefresh = (at: Date) =>
    Effect.map(
      sql`
        UPDATE card_balance_follower SET refreshed_at = ${at}
        WHERE refreshed_at <= ${new Date(at.getTime() - Duration.toMillis(refreshEvery))}
        RETURNING refreshed_at`,
      (rows) => rows.length === 1
    )

  /**
   * Every card wallet read again, page by page, then the row: moved to the head (back to it when
   * the chain went back), checked and refreshed now.
   */
  const refresh = (head: bigint, at: Date, reason: RefreshReason) =>
    Effect.gen(function* () {
      const wentBack = reason === "went-back"
      let after = ""
      let wallets = 0
      for (;;) {
        const page = yield* sql<{ readonly address: Address }>`
          SELECT address FROM cards WHERE address > ${after} ORDER BY address LIMIT ${PAGE}`
        if (page.length === 0) break
        const addresses = page.map(({ address }) => address)
        const positions = yield* positionsOf(addresses)
        yield* sql`WITH ${storePositions(positions, head, at, wentBack ? "any" : "same-or-older")} SELECT 1`
        wallets += page.length
        after = addresses[addresses.length - 1]!
      }
      yield* showView(
        yield* sql`
          INSERT INTO card_balance_follower AS follower (id, block, checked_at, refreshed_at)
          VALUES (true, ${head}::bigint, ${at}::timestamptz, ${at}::timestamptz)
          ON CONFLICT (id) DO UPDATE SET
            block = ${sql.literal(wentBack ? "excluded.block" : "GREATEST(follower.block, excluded.block)")},
            checked_at = GREATEST(follower.checked_at, excluded.checked_at),
            refreshed_at = GREATEST(follower.refreshed_at, excluded.refreshed_at)
          RETURNING block, checked_at`
      )
      yield* countBalanceRefresh(reason)
      if (reason !== "schedule") {
        yield* Effect.logInfo(`card balances: read ${wallets} card wallet(s) at block ${head} (${reason})`)
      }
    })

  const tick = Effect.gen(function* () {
    const head = (yield* chain.watchedHead).number
    const row = yield* followerRow
    const at = new Date(yield* Clock.currentTimeMillis)
    const step = nextStep({ head, row, previousHead: yield* Ref.get(previousHead), now: at.getTime(), refreshEvery })
    if (step._tag === "Refresh") yield* refresh(head, at, step.reason)
    else if (step._tag === "Wait") {
      if (Option.isSome(row)) yield* setBalanceFollower(row.value.block, row.value.checkedAt)
    } else if (step.refreshDue && (yield* takeScheduledRefresh(at))) yield* refresh(head, at, "schedule")
    else yield* follow(step.from, head, at)
    yield* Ref.set(previousHead, Option.some(head))
  })

  return { tick }
})

/**
 * The follower, every CARD_BALANCE_POLL on every replica, from start-up; needs the `ChainClient`
 * and the `SqlClient`.
 */
export const BalanceFollowerLive = backgroundLoop(
  "card-balances",
  Effect.gen(function* () {
    const { poll } = yield* balanceSettings
    const { tick } = yield* balanceFollower
    return { tick, every: poll }
  })
)
