/**
 * When a card is due (pure). Each card has its own phase inside the interval, derived from its id,
 * so that the cards of a programme are spread over the interval instead of all falling due at its
 * start: a card is due at `phase + k × interval`, the same instants on every replica, which makes
 * (card, due time) the identity of one interval's decision.
 */

/** FNV-1a over the id's UTF-16 code units: cheap, stable across processes and versions. */
export const hashOf = (id: string): number => {
  let hash = 0x811c9dc5
  for (let i = 0; i < id.length; i++) {
    hash ^= id.charCodeAt(i)
    hash = Math.imul(hash, 0x01000193)
  }
  return hash >>> 0
}

/** The card's offset into every interval, ms in [0, spreadMs) (0 when the cards are not spread). */
export const phaseOf = (cardId: string, spreadMs: number): number =>
  spreadMs <= 0 ? 0 : hashOf(cardId) % Math.floor(spreadMs)

/**
 * The card's first due time strictly after `after`: the next instant of its grid (`phase + k ×
 * interval`). However far behind the loop fell, a card is due once more, not once per missed interval.
 */
export const nextDueAfter = (cardId: string, after: number, intervalMs: number, spreadMs: number): number => {
  const phase = phaseOf(cardId, Math.min(spreadMs, intervalMs))
  return phase + (Math.floor((after - phase) / intervalMs) + 1) * intervalMs
}
