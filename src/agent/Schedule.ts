/**
 * When a card is due (pure). Each card has its own phase inside the interval, derived from its id,
 * so that the cards of a programme are spread over the interval instead of all falling due at its
 * start: a card is due at `phase + k × interval`, the same instants on every replica, which makes
 * (card, due time) the identity of one interval's decision.
 *
 * The phase grows with the id's hash, so the cards due in one stretch of the interval are one range
 * of hashes: a slice. The loop claims a slice per interval (`AgentRepo.claimSlice` computes these
 * windows in SQL; `test/agent/Scale.test.ts` checks them against this module).
 */

/** The hash space: ids hash to [0, 2^32). */
const HASHES = 2n ** 32n

/**
 * FNV-1a over the id's UTF-16 code units, then MurmurHash3's finalizer: cheap, stable across
 * processes and versions. The finalizer mixes the last characters into the high bits, which the
 * phase is read from: without it ids that differ in a trailing counter bunch (up to ±25 % per tenth
 * of the interval).
 */
export const hashOf = (id: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < id.length; i++) {
    hash ^= id.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  hash ^= hash >>> 16
  hash = Math.imul(hash, 0x85ebca6b)
  hash ^= hash >>> 13
  hash = Math.imul(hash, 0xc2b2ae35)
  hash ^= hash >>> 16
  return hash >>> 0
}

/**
 * The phase, ms in [0, spreadMs), of a hash in [0, 2^32]: growing with the hash (exact: in bigints).
 * `AgentRepo.phaseSql` is the same formula in SQL (checked equal by test/agent/ScheduleSql.test.ts).
 */
export const phaseOfHash = (hash: bigint, spreadMs: number): number =>
  spreadMs <= 0 ? 0 : Number((hash * BigInt(Math.floor(spreadMs))) / HASHES)

/** The card's offset into every interval, ms in [0, spreadMs) (0 when the cards are not spread). */
export const phaseOf = (cardId: string, spreadMs: number): number => phaseOfHash(BigInt(hashOf(cardId)), spreadMs)

/**
 * How many slices `cards` cards are cut into: a power of two, so that a slice holds between half a
 * page and a page on average (the count changes the slicing only when it doubles or halves).
 */
export const sliceCount = (cards: number, pageSize: number): number =>
  2 ** Math.max(0, Math.ceil(Math.log2(Math.max(1, cards / pageSize))))

/** A slice's hashes, [from, to), and its window in the interval that last ended by an instant. */
export interface SliceWindow {
  readonly from: number
  readonly to: number
  /** The interval's start: a card of the slice is due at `base + phaseOf(card)`. */
  readonly base: number
  /** When its first card is due in that interval (ms since the epoch). */
  readonly opens: number
  /** When its last card is due, at the latest: the slice is claimed once this has passed. */
  readonly closes: number
}

/**
 * Slice `slice` of `slices` in the last interval whose window closed by `dueBy`: every card of the
 * slice is due in [opens, closes].
 */
export const sliceWindow = (
  slice: number,
  slices: number,
  dueBy: number,
  intervalMs: number,
  spreadMs: number
): SliceWindow => {
  const from = (BigInt(slice) * HASHES) / BigInt(slices)
  const to = (BigInt(slice + 1) * HASHES) / BigInt(slices)
  const spread = Math.min(spreadMs, intervalMs)
  const base = Math.floor((dueBy - phaseOfHash(to, spread)) / intervalMs) * intervalMs
  return {
    from: Number(from),
    to: Number(to),
    base,
    opens: base + phaseOfHash(from, spread),
    closes: base + phaseOfHash(to, spread)
  }
}
