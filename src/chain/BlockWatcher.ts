/**
 * Receipts by block, not by payment: one watcher per replica follows the chain's head and, when new
 * blocks arrive, reads the receipts of the transactions it waits for, so that a payment waiting for
 * its receipt costs no call of its own.
 *
 * - The head (`eth_getBlockByNumber("latest")`: its number, hash, parent and transaction hashes, in
 *   one call) is polled every CHAIN_POLL_INTERVAL while something is awaited, every
 *   `idleMs` otherwise; a transaction the node took (`sent`, not `expect`: its block can only follow
 *   the broadcast's answer) or a receipt asked for without `expect` brings the next poll to
 *   CHAIN_POLL_INTERVAL after the last one.
 * - Every block after the last one read is covered, not only the latest: the missed ones by
 *   `eth_getBlockReceipts` each, or, when that costs more calls than there are transactions
 *   awaited (or the node lacks the method), by reading the awaited receipts by hash. The latest
 *   block is read only when its transaction list holds an awaited one.
 * - A head that goes back (a lower number, another hash at a height seen, a parent that is not
 *   the block seen below) is reported (`headWentBack`): the relayer's nonce is checked at once.
 *   Receipts found in the blocks it replaced are forgotten and awaited again.
 * - A transaction is `expect`ed right before its broadcast, so no block can hold it before the
 *   watcher looks for it; a hash asked for without that (the tracker's checks, a reconciler after a
 *   restart) is read once directly, then caught from the blocks like the others.
 *
 * The pauses are on the wall clock (a node mines in real time, also under a test's TestClock).
 *
 * One unit: the pure decisions (what a new head means, what to read for it) come first and are
 * unit-tested alone; the watcher below is the one state they decide over.
 */
import { Data, Deferred, Effect, Option, Queue, type Scope } from "effect"
import type { Hash, Hex } from "viem"
import type { ChainError } from "./ChainClient.js"
import { wallClockPause } from "./WallClock.js"

/** The head as one poll reads it. */
export interface BlockHead {
  readonly number: bigint
  readonly hash: Hash
  readonly parentHash: Hash
  /** Seconds. */
  readonly timestamp: bigint
  /** EIP-1559's base fee, wei (none on a chain without it). */
  readonly baseFeePerGas?: bigint
  /** Its transactions' hashes. */
  readonly transactions: ReadonlyArray<Hash>
}

/** A transaction receipt as the node sends it (the fields this service reads). */
export interface RawReceipt {
  readonly transactionHash: Hash
  /** Its sender. */
  readonly from: Hex
  readonly status: Hex
  readonly gasUsed: Hex
  readonly blockNumber: Hex
  readonly blockHash: Hash
  readonly logs: ReadonlyArray<{ readonly address: Hex; readonly topics: ReadonlyArray<Hex>; readonly data: Hex }>
}

/** The node has no `eth_getBlockReceipts`: receipts are read by hash from then on. */
export class NoBlockReceipts extends Data.TaggedError("NoBlockReceipts")<{}> {}

/** What the watcher reads the chain with. */
export interface BlockSource {
  readonly head: Effect.Effect<BlockHead, ChainError>
  /** Every receipt of each block, in the order asked. */
  readonly blockReceipts: (
    numbers: ReadonlyArray<bigint>
  ) => Effect.Effect<ReadonlyArray<ReadonlyArray<RawReceipt>>, ChainError | NoBlockReceipts>
  /** Each transaction's receipt, none when not mined, in the order asked. */
  readonly receipts: (hashes: ReadonlyArray<Hash>) => Effect.Effect<ReadonlyArray<RawReceipt | null>, ChainError>
}

// -------------------------------------------------------------------------------------------------
// The pure parts: what a new head means, and what to read for it

/** The heads seen: the last one, the blocks read through, and recent heights' hashes. */
export interface Seen {
  readonly latest: bigint | undefined
  /** Every block up to this one was read for what was awaited then. */
  readonly readThrough: bigint | undefined
  readonly hashes: ReadonlyMap<bigint, Hash>
}

export const nothingSeen: Seen = { latest: undefined, readThrough: undefined, hashes: new Map() }

/** Heights whose hash is kept to recognise a replaced block. */
const HASHES_KEPT = 128n

export type HeadChange =
  | { readonly _tag: "First" }
  | { readonly _tag: "Same" }
  | { readonly _tag: "Advanced" }
  | { readonly _tag: "WentBack"; readonly from: bigint; readonly why: string }

const same = (a: Hash, b: Hash) => a.toLowerCase() === b.toLowerCase()

/** How `head` follows what was seen. */
export const compareHead = (seen: Seen, head: BlockHead): HeadChange => {
  if (seen.latest === undefined) return { _tag: "First" }
  const from = seen.latest
  if (head.number < from)
    return { _tag: "WentBack", from, why: `the head went back from block ${from} to ${head.number}` }
  const known = seen.hashes.get(head.number)
  if (known !== undefined && !same(known, head.hash)) {
    return { _tag: "WentBack", from, why: `block ${head.number} was replaced` }
  }
  const parent = seen.hashes.get(head.number - 1n)
  if (parent !== undefined && !same(parent, head.parentHash)) {
    return { _tag: "WentBack", from, why: `block ${head.number - 1n} was replaced under block ${head.number}` }
  }
  return head.number === from ? { _tag: "Same" } : { _tag: "Advanced" }
}

/**
 * After a head that went back: blocks from the new head on are read again. How deep the other fork
 * goes is not known, so no height's hash is trusted any more (each is learnt again as it is polled).
 */
export const rewound = (seen: Seen, head: BlockHead): Seen => ({
  latest: head.number,
  readThrough:
    seen.readThrough === undefined ? undefined : seen.readThrough < head.number ? seen.readThrough : head.number - 1n,
  hashes: new Map()
})

/**
 * `head` seen; read through it when `read`. Its parent's hash is learnt with it (a block between
 * two polls is then known too, and a receipt in it can be vouched for without reading it again).
 */
export const recorded = (seen: Seen, head: BlockHead, read: boolean): Seen => ({
  latest: head.number,
  readThrough: read ? head.number : seen.readThrough,
  hashes: new Map(
    [
      ...seen.hashes,
      ...(head.number > 0n ? [[head.number - 1n, head.parentHash] as const] : []),
      [head.number, head.hash] as const
    ].filter(([n]) => n + HASHES_KEPT > head.number)
  )
})

export type Reads =
  | { readonly _tag: "None" }
  | { readonly _tag: "Blocks"; readonly numbers: ReadonlyArray<bigint> }
  | { readonly _tag: "Hashes"; readonly hashes: ReadonlyArray<Hash> }

const none: Reads = { _tag: "None" }

/**
 * What to read so that every awaited transaction mined in a block after `readThrough`, up to
 * `head`, is found, in as few calls as possible: the blocks (the missed ones, and the head when its
 * list holds an awaited transaction), or the awaited receipts by hash when that is fewer calls or
 * the node cannot read a block's receipts. Nothing read before (`readThrough` unknown): by hash.
 * `awaited` is lower case.
 */
export const planReads = (
  readThrough: bigint | undefined,
  head: BlockHead,
  awaited: ReadonlyArray<Hash>,
  blockReceipts: boolean
): Reads => {
  if (awaited.length === 0) return none
  if (readThrough === undefined) return { _tag: "Hashes", hashes: awaited }
  if (readThrough >= head.number) return none
  const missed = head.number - readThrough - 1n
  const listed = new Set(head.transactions.map((hash) => hash.toLowerCase()))
  const inHead = awaited.filter((hash) => listed.has(hash))
  const blocks = missed + (inHead.length > 0 ? 1n : 0n)
  if (blocks === 0n) return none
  if (blockReceipts && blocks <= BigInt(awaited.length)) {
    const numbers: Array<bigint> = []
    for (let n = readThrough + 1n; n < head.number; n++) numbers.push(n)
    if (inHead.length > 0) numbers.push(head.number)
    return { _tag: "Blocks", numbers }
  }
  return { _tag: "Hashes", hashes: missed > 0n ? awaited : inHead }
}

// -------------------------------------------------------------------------------------------------
// The watcher

export interface BlockWatcherOptions {
  /** The head poll while something is awaited (CHAIN_POLL_INTERVAL). */
  readonly pollMs: number
  /** The head poll while nothing is. */
  readonly idleMs: number
  /** An expected transaction nobody waits for is forgotten this long after its last wait. */
  readonly forgetAfterMs: number
  /** A head that went back (a reorg, a node restored from an older state). */
  readonly headWentBack: (why: string) => Effect.Effect<void>
  /** Each new head, after its receipts were read. */
  readonly newHead: (head: BlockHead) => Effect.Effect<void>
}

export interface BlockWatcher {
  /**
   * `hash`, sent by `sender`, is about to be broadcast: its receipt is caught from the next blocks.
   * With `replaces` (a fee bump of that transaction: the same nonce), whoever waits for the one
   * replaced gets this one's receipt when it is the one mined.
   */
  readonly expect: (hash: Hash, sender: string, replaces?: Hash) => Effect.Effect<void>
  /**
   * A node took a transaction `expect`ed before: an idle watcher looks (no sooner than
   * CHAIN_POLL_INTERVAL after its last look). Not at `expect`: a look before the broadcast answered
   * cannot find it, and on a node that mines on arrival (the devnet) its block is there once it has.
   */
  readonly sent: Effect.Effect<void>
  /**
   * The first receipt of any of `hashes` (a transaction and its replacements) within `timeoutMs` of
   * wall-clock time; none past it. A hash not expected is read once directly first (timeout 0: only
   * that read).
   */
  readonly receipt: (
    hashes: ReadonlyArray<Hash>,
    timeoutMs: number
  ) => Effect.Effect<Option.Option<RawReceipt>, ChainError>
  /**
   * Expected transactions of `sender` still not mined two blocks after the head seen when they were
   * sent (on a node that mines what it has, the next block holds them): queued, or lost.
   */
  readonly overdue: (sender: string) => number
  /** Whether `hash` was expected as sent by `sender`. */
  readonly sentBy: (hash: Hash, sender: string) => boolean
  /** The last head polled (at most a poll old while something is awaited); none before the first poll answered. */
  readonly latest: () => Option.Option<BlockHead>
}

interface Entry {
  readonly sender: string | undefined
  /** The transaction this one replaces (a fee bump), lower case. */
  replaces: string | undefined
  /** The head seen when it was expected: a block after the next one should hold it. */
  readonly sentAt: bigint | undefined
  found: RawReceipt | undefined
  signal: Deferred.Deferred<RawReceipt>
  waiters: number
  forgetAt: number
}

export const blockWatcher = (
  source: BlockSource,
  options: BlockWatcherOptions
): Effect.Effect<BlockWatcher, never, Scope.Scope> =>
  Effect.gen(function* () {
    const entries = new Map<string, Entry>()
    /** Receipts found, by hash: answered again without a call while their block is the one seen at its height. */
    const mined = new Map<string, RawReceipt>()
    const wake = yield* Queue.sliding<void>(1)
    let seen = nothingSeen
    let latestHead: BlockHead | undefined
    let blockReceipts = true
    /** The watcher pauses at the idle pace (nothing was awaited at its last look). */
    let idle = true

    /** An idle watcher looks (paced from its last look: `pause`). */
    const wakeIfIdle = Effect.suspend(() => (idle ? Queue.offer(wake, undefined) : Effect.void))

    const entryOf = (hash: Hash, sender: string | undefined) =>
      Effect.gen(function* () {
        const key = hash.toLowerCase()
        const known = entries.get(key)
        if (known !== undefined) return { entry: known, fresh: false }
        const entry: Entry = {
          sender: sender?.toLowerCase(),
          replaces: undefined,
          sentAt: seen.latest,
          found: undefined,
          signal: yield* Deferred.make<RawReceipt>(),
          waiters: 0,
          forgetAt: Date.now() + options.forgetAfterMs
        }
        entries.set(key, entry)
        return { entry, fresh: true }
      })

    const found = (receipt: RawReceipt) =>
      Effect.gen(function* () {
        const entry = entries.get(receipt.transactionHash.toLowerCase())
        if (entry === undefined || entry.found !== undefined) return
        mined.set(receipt.transactionHash.toLowerCase(), receipt)
        // Every version of its nonce is answered with it: the ones it replaced, and the ones that
        // replaced it (they can never be mined now, nor count as overdue).
        const versions = new Set<string>([receipt.transactionHash.toLowerCase()])
        for (let grew = true; grew; ) {
          grew = false
          for (const [key, other] of entries) {
            if (versions.has(key) && other.replaces !== undefined && !versions.has(other.replaces)) {
              versions.add(other.replaces)
              grew = true
            }
            if (!versions.has(key) && other.replaces !== undefined && versions.has(other.replaces)) {
              versions.add(key)
              grew = true
            }
          }
        }
        for (const key of versions) {
          const version = entries.get(key)
          if (version === undefined || version.found !== undefined) continue
          version.found = receipt
          yield* Deferred.succeed(version.signal, receipt)
        }
      })

    /** Receipts found in blocks from `number` on are no longer on the chain seen: awaited again. */
    const unfindFrom = (number: bigint) =>
      Effect.gen(function* () {
        for (const entry of entries.values()) {
          if (entry.found !== undefined && BigInt(entry.found.blockNumber) >= number) {
            entry.found = undefined
            entry.signal = yield* Deferred.make<RawReceipt>()
          }
        }
      })

    /** A receipt found before whose block is still the one seen at its height (a tracker's re-check). */
    const stillMined = (hash: Hash) => {
      const receipt = mined.get(hash.toLowerCase())
      if (receipt === undefined) return undefined
      const atHeight = seen.hashes.get(BigInt(receipt.blockNumber))
      return atHeight !== undefined && same(atHeight, receipt.blockHash) ? receipt : undefined
    }

    const awaited = () => [...entries].filter(([, entry]) => entry.found === undefined).map(([key]) => key as Hash)

    const read = (reads: Reads) => {
      switch (reads._tag) {
        case "None":
          return Effect.succeed<ReadonlyArray<RawReceipt | null>>([])
        case "Hashes":
          return source.receipts(reads.hashes)
        case "Blocks":
          return source.blockReceipts(reads.numbers).pipe(
            Effect.map((blocks) => blocks.flat()),
            Effect.catchTag("NoBlockReceipts", () => {
              blockReceipts = false
              return source.receipts(awaited())
            })
          )
      }
    }

    const round = Effect.gen(function* () {
      const head = yield* source.head
      latestHead = head
      const change = compareHead(seen, head)
      if (change._tag === "WentBack") {
        seen = rewound(seen, head)
        yield* unfindFrom(head.number)
        yield* options.headWentBack(change.why)
      }
      const receipts = yield* read(planReads(seen.readThrough, head, awaited(), blockReceipts)).pipe(
        Effect.map(Option.some),
        Effect.catchAll(() => Effect.succeed(Option.none<ReadonlyArray<RawReceipt | null>>()))
      )
      if (Option.isSome(receipts)) {
        for (const receipt of receipts.value) if (receipt !== null) yield* found(receipt)
      }
      seen = recorded(seen, head, Option.isSome(receipts))
      if (change._tag === "Advanced") yield* options.newHead(head)
      const now = Date.now()
      for (const [key, entry] of entries) if (entry.waiters === 0 && entry.forgetAt <= now) entries.delete(key)
      // Beyond the heights whose hash is kept, a receipt can no longer be vouched for.
      for (const [key, receipt] of mined) if (!seen.hashes.has(BigInt(receipt.blockNumber))) mined.delete(key)
    })

    /** When the last poll started: a wake-up polls no sooner than CHAIN_POLL_INTERVAL after it. */
    let polledAt = 0
    const pause = Effect.suspend(() => {
      idle = awaited().length === 0
      // Woken (something awaited while idle): polled at the CHAIN_POLL_INTERVAL pace from the last
      // poll, not at once, so that many sends at once cost one poll, not one each.
      const woken = Queue.take(wake).pipe(
        Effect.zipRight(Effect.suspend(() => wallClockPause(Math.max(0, polledAt + options.pollMs - Date.now()))))
      )
      return Effect.raceFirst(wallClockPause(idle ? options.idleMs : options.pollMs), woken).pipe(
        Effect.zipRight(Queue.takeAll(wake)),
        Effect.zipRight(
          Effect.sync(() => {
            polledAt = Date.now()
          })
        )
      )
    })
    // The head known before anything is sent: a transaction expected after it is looked for in the
    // blocks that follow, never by hash. A poll that fails (no answer) is tried again at the next one.
    yield* Effect.ignore(round)
    yield* Effect.forkScoped(Effect.forever(pause.pipe(Effect.zipRight(Effect.ignore(round)))))

    const expect = (hash: Hash, sender: string, replaces?: Hash) =>
      Effect.map(entryOf(hash, sender), ({ entry }) => {
        if (replaces !== undefined) entry.replaces = replaces.toLowerCase()
      })

    const receipt = (hashes: ReadonlyArray<Hash>, timeoutMs: number) =>
      Effect.gen(function* () {
        const watched = yield* Effect.forEach(hashes, (hash) => entryOf(hash, undefined))
        // A watcher polling at the idle pace looks now; one already polling at CHAIN_POLL_INTERVAL
        // needs no extra look (one per transaction would cost a call each).
        if (watched.some(({ fresh }) => fresh)) yield* wakeIfIdle
        const held = watched.map(({ entry }) => entry)
        const first = held.find((entry) => entry.found !== undefined)
        if (first !== undefined) return Option.some(first.found!)
        const known = hashes.map((hash) => stillMined(hash)).find((receipt) => receipt !== undefined)
        if (known !== undefined) {
          for (const [i, { fresh }] of watched.entries()) if (fresh) entries.delete(hashes[i]!.toLowerCase())
          return Option.some(known)
        }
        // Registered first, then read: a block read after this catches it, one before is this read.
        const unexpected = hashes.filter((_, i) => watched[i]!.fresh)
        if (unexpected.length > 0) {
          const direct = (yield* source.receipts(unexpected)).find((r) => r !== null)
          if (direct !== undefined && direct !== null) {
            yield* found(direct)
            return Option.some(direct)
          }
        }
        if (timeoutMs <= 0) {
          // A look, not a wait: nothing is left watched for it.
          for (const [i, { fresh }] of watched.entries()) if (fresh) entries.delete(hashes[i]!.toLowerCase())
          return Option.none<RawReceipt>()
        }
        for (const entry of held) entry.waiters++
        return yield* Effect.raceAll([
          ...held.map((entry) => Effect.map(Deferred.await(entry.signal), Option.some)),
          Effect.as(wallClockPause(timeoutMs), Option.none<RawReceipt>())
        ]).pipe(
          Effect.ensuring(
            Effect.sync(() => {
              for (const entry of held) {
                entry.waiters--
                entry.forgetAt = Date.now() + options.forgetAfterMs
              }
            })
          )
        )
      }).pipe(
        Effect.tap((answer) =>
          Effect.sync(() => {
            // A receipt handed out is not kept: asked again, it is read again (it may have moved).
            if (Option.isSome(answer)) {
              const key = answer.value.transactionHash.toLowerCase()
              if (entries.get(key)?.waiters === 0) entries.delete(key)
            }
          })
        )
      )

    return {
      expect,
      sent: wakeIfIdle,
      receipt,
      overdue: (sender) => {
        const who = sender.toLowerCase()
        const latest = seen.latest
        if (latest === undefined) return 0
        let count = 0
        for (const entry of entries.values()) {
          if (
            entry.sender === who &&
            entry.found === undefined &&
            entry.sentAt !== undefined &&
            entry.sentAt + 2n <= latest
          )
            count++
        }
        return count
      },
      sentBy: (hash, sender) => entries.get(hash.toLowerCase())?.sender === sender.toLowerCase(),
      latest: () => Option.fromNullable(latestHead)
    }
  })
