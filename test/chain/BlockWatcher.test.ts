/**
 * The block watcher's pure parts: what a new head means (went back or not), and what to read so
 * that no awaited transaction mined since the last read is missed, in as few calls as possible; and
 * the watcher itself on a scripted chain: a fee bump and the transaction it replaces answer each other.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect, FastCheck, Fiber, Option } from "effect"
import { type Hash, toHex } from "viem"
import {
  type BlockHead,
  type BlockSource,
  blockWatcher,
  compareHead,
  nothingSeen,
  planReads,
  type RawReceipt,
  recorded,
  rewound,
  type Seen
} from "../../src/chain/BlockWatcher.js"
import { eventually } from "../support/wait.js"

const hashOf = (label: string): Hash => toHex(label, { size: 32 })

/** A chain of `length` blocks (from 0), each with the transactions given by `txsIn(number)`, under `fork`. */
const chainOf = (length: number, fork: string, txsIn: (number: number) => ReadonlyArray<Hash> = () => []) =>
  Array.from(
    { length },
    (_, n): BlockHead => ({
      number: BigInt(n),
      hash: hashOf(`${fork}-${n}`),
      parentHash: hashOf(`${fork}-${n - 1}`),
      timestamp: BigInt(n),
      transactions: txsIn(n)
    })
  )

/** A chain, the watcher's last read, the head now, and transactions spread over the blocks. */
const scenario = FastCheck.record({
  length: FastCheck.integer({ min: 1, max: 40 }),
  readThrough: FastCheck.nat(),
  placements: FastCheck.array(FastCheck.option(FastCheck.nat(), { nil: undefined }), { maxLength: 12 }),
  blockReceipts: FastCheck.boolean()
})

describe("what to read on a new head", () => {
  it.prop(
    "covers every awaited transaction mined after the last read, in min(new blocks, awaited) calls",
    [scenario],
    ([s]) => {
      const readThrough = BigInt(s.readThrough % s.length) - 1n // -1: nothing read before block 0
      const awaited = s.placements.map((_, i) => hashOf(`tx-${i}`).toLowerCase() as Hash)
      // each awaited transaction in one block (or not mined), anywhere: before or after the last read
      const blockOf = (i: number) => (s.placements[i] === undefined ? undefined : s.placements[i]! % s.length)
      const chain = chainOf(s.length, "a", (n) => awaited.filter((_, i) => blockOf(i) === n))
      const head = chain[chain.length - 1]!
      const reads = planReads(readThrough, head, awaited, s.blockReceipts)
      const minedSince = awaited.filter((_, i) => blockOf(i) !== undefined && BigInt(blockOf(i)!) > readThrough)
      const covered = (hash: Hash) => {
        const i = awaited.indexOf(hash)
        if (reads._tag === "Hashes") return reads.hashes.includes(hash)
        if (reads._tag === "Blocks") return reads.numbers.includes(BigInt(blockOf(i)!))
        return false
      }
      for (const hash of minedSince) expect(covered(hash)).toBe(true)
      const calls = reads._tag === "Hashes" ? reads.hashes.length : reads._tag === "Blocks" ? reads.numbers.length : 0
      const newBlocks = Number(head.number - readThrough)
      // without eth_getBlockReceipts: by hash, at most one call per awaited transaction
      expect(calls).toBeLessThanOrEqual(s.blockReceipts ? Math.min(newBlocks, awaited.length) : awaited.length)
      if (!s.blockReceipts) expect(reads._tag).not.toBe("Blocks")
    }
  )

  it("reads nothing when nothing is awaited, or no block is new", () => {
    const [head] = chainOf(1, "a")
    expect(planReads(0n, { ...head!, number: 5n }, [], true)._tag).toBe("None")
    expect(planReads(5n, { ...head!, number: 5n }, [hashOf("x")], true)._tag).toBe("None")
  })

  it("asks by hash when nothing was read before (the watcher's first head)", () => {
    const [head] = chainOf(1, "a")
    expect(planReads(undefined, head!, [hashOf("x")], true)).toEqual({ _tag: "Hashes", hashes: [hashOf("x")] })
  })

  it("reads the head's receipts only when its list holds an awaited transaction", () => {
    const awaited = hashOf("mine").toLowerCase() as Hash
    const chain = chainOf(3, "a", (n) => (n === 2 ? [hashOf("other")] : []))
    expect(planReads(1n, chain[2]!, [awaited], true)._tag).toBe("None")
    const withMine = { ...chain[2]!, transactions: [hashOf("other"), awaited] }
    expect(planReads(1n, withMine, [awaited], true)).toEqual({ _tag: "Blocks", numbers: [2n] })
  })
})

describe("what a new head means", () => {
  const follow = (heads: ReadonlyArray<BlockHead>) =>
    heads.reduce<Seen>((seen, head) => recorded(seen, head, true), nothingSeen)

  it.prop(
    "a chain that only grows never goes back",
    [FastCheck.integer({ min: 2, max: 60 }), FastCheck.nat()],
    ([length, skip]) => {
      const chain = chainOf(length, "a")
      // heads seen with gaps between polls
      const polled = chain.filter((_, n) => n % ((skip % 4) + 1) === 0 || n === length - 1)
      let seen = nothingSeen
      for (const head of polled) {
        const change = compareHead(seen, head)
        expect(change._tag).not.toBe("WentBack")
        seen = recorded(seen, head, true)
      }
    }
  )

  it.prop(
    "a lower head, another block at a height seen, or a new head on another parent went back",
    [FastCheck.integer({ min: 3, max: 40 }), FastCheck.nat()],
    ([length, at]) => {
      const seen = follow(chainOf(length, "a"))
      const height = at % length
      const other = chainOf(length + 1, "b")
      // lower (or the same height) on another fork
      expect(compareHead(seen, other[height]!)._tag).toBe("WentBack")
      // one block on top of a replaced parent
      expect(compareHead(seen, { ...other[length]!, parentHash: hashOf(`b-${length - 1}`) })._tag).toBe("WentBack")
      // the same head again, and its child, are fine
      const a = chainOf(length + 1, "a")
      expect(compareHead(seen, a[length - 1]!)._tag).toBe("Same")
      expect(compareHead(seen, a[length]!)._tag).toBe("Advanced")
    }
  )

  it("after going back, blocks from the new head on are read again, and the new fork is followed", () => {
    const seen = follow(chainOf(10, "a"))
    const head = chainOf(5, "b")[4]!
    const after = rewound(seen, head)
    expect(after.readThrough).toBe(3n)
    expect(after.latest).toBe(4n)
    const followed = recorded(after, head, true)
    expect(compareHead(followed, head)._tag).toBe("Same")
    expect(compareHead(followed, chainOf(6, "b")[5]!)._tag).toBe("Advanced")
  })
})

describe("the watcher, on a scripted chain", () => {
  /** A chain the test grows block by block; the watcher reads it like a node, and its reads are counted. */
  const scriptedChain = () => {
    const blocks: Array<{ head: BlockHead; receipts: ReadonlyArray<RawReceipt> }> = [
      { head: { ...chainOf(1, "a")[0]! }, receipts: [] }
    ]
    const reads = { head: 0, blocks: 0, hashes: 0 }
    const receiptOf = (hash: Hash, number: number): RawReceipt => ({
      transactionHash: hash,
      from: "0x0000000000000000000000000000000000000001",
      status: "0x1",
      gasUsed: "0x5208",
      blockNumber: toHex(number),
      blockHash: hashOf(`a-${number}`),
      logs: []
    })
    const source: BlockSource = {
      head: Effect.sync(() => {
        reads.head++
        return blocks[blocks.length - 1]!.head
      }),
      blockReceipts: (numbers) =>
        Effect.sync(() => {
          reads.blocks += numbers.length
          return numbers.map((n) => blocks[Number(n)]?.receipts ?? [])
        }),
      receipts: (hashes) =>
        Effect.sync(() => {
          reads.hashes += hashes.length
          return hashes.map(
            (hash) => blocks.flatMap((block) => block.receipts).find((r) => r.transactionHash === hash) ?? null
          )
        })
    }
    const mine = (hashes: ReadonlyArray<Hash>) => {
      const number = blocks.length
      const [head] = chainOf(number + 1, "a", () => hashes).slice(number)
      blocks.push({ head: head!, receipts: hashes.map((hash) => receiptOf(hash, number)) })
    }
    return { source, reads, mine }
  }
  const options = {
    pollMs: 5,
    idleMs: 5,
    forgetAfterMs: 60_000,
    headWentBack: () => Effect.void,
    newHead: () => Effect.void
  }
  const SENDER = "0x00000000000000000000000000000000000000aa"
  /** A watcher over a scripted chain, and a stuck transaction's hash and its fee bump's. */
  const stuckAndBump = Effect.gen(function* () {
    const chain = scriptedChain()
    const watcher = yield* blockWatcher(chain.source, options)
    return { chain, watcher, stuck: hashOf("stuck").toLowerCase() as Hash, bump: hashOf("bump").toLowerCase() as Hash }
  })

  it.live(
    "a fee bump mined: whoever waits for the stuck transaction gets the bump's receipt, read from its block",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { chain, watcher, stuck, bump } = yield* stuckAndBump
          yield* watcher.expect(stuck, SENDER)
          const waiting = yield* Effect.fork(watcher.receipt([stuck], 30_000))
          yield* watcher.expect(bump, SENDER, stuck)
          chain.mine([bump])
          const answer = yield* Fiber.join(waiting)
          expect(Option.map(answer, (receipt) => receipt.transactionHash)).toEqual(Option.some(bump))
          // read from its block, not by hash; and the stuck version, never to be mined, is not overdue
          expect(chain.reads.hashes).toBe(0)
          expect(chain.reads.blocks).toBe(1)
          const headsSeen = chain.reads.head
          chain.mine([])
          chain.mine([])
          yield* eventually(
            "the watcher to poll the two new heads",
            Effect.sync(() => chain.reads.head),
            (n) => n >= headsSeen + 2
          )
          expect(watcher.overdue(SENDER)).toBe(0)
        })
      )
  )

  it.live(
    "the stuck transaction mined after all: its bump (never to be mined) is answered with it and not overdue",
    () =>
      Effect.scoped(
        Effect.gen(function* () {
          const { chain, watcher, stuck, bump } = yield* stuckAndBump
          yield* watcher.expect(stuck, SENDER)
          yield* watcher.expect(bump, SENDER, stuck)
          const waiting = yield* Effect.fork(watcher.receipt([bump], 30_000))
          chain.mine([stuck])
          const answer = yield* Fiber.join(waiting)
          expect(Option.map(answer, (receipt) => receipt.transactionHash)).toEqual(Option.some(stuck))
          chain.mine([])
          chain.mine([])
          yield* eventually(
            "the watcher to see two more heads",
            Effect.sync(() => chain.reads.head),
            (n) => n >= 6
          )
          expect(watcher.overdue(SENDER)).toBe(0)
        })
      )
  )
})
