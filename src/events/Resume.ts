/**
 * Where a stream starts and which stored events it may send next. Pure: the decisions that make
 * "every event after Last-Event-ID exactly once" hold, tested exhaustively on their own.
 *
 * A user's ids are dense (1, 2, 3, ...) and become visible in id order (EventRepo), so a stream
 * that has sent up to `cursor` sends exactly `cursor + 1`, `cursor + 2`, ... and nothing else: an
 * id that does not follow is a gap, never skipped over.
 */

export type StartPoint =
  /** Send the events after `after`, then the live ones. */
  | { readonly _tag: "From"; readonly after: number }
  /** The events right after the requested id were pruned: the client must re-read its resources. */
  | { readonly _tag: "Expired" }
  /** The requested id is newer than the user's newest event: not an id of this stream. */
  | { readonly _tag: "Unknown" }

/**
 * Where a stream starts. `requested` is the client's Last-Event-ID (none: only what happens from
 * now on), `lastId` the user's newest event id (0 before any), `nextKept` whether the event right
 * after `requested` is still stored.
 */
export const startPoint = (requested: number | undefined, lastId: number, nextKept: boolean): StartPoint => {
  if (requested === undefined) return { _tag: "From", after: lastId }
  if (requested > lastId) return { _tag: "Unknown" }
  if (requested === lastId || nextKept) return { _tag: "From", after: requested }
  return { _tag: "Expired" }
}

/**
 * Of `rows` (ascending ids, as read after some id at most `cursor`), those a stream at `cursor`
 * sends now: the run `cursor + 1, cursor + 2, ...` with no hole. `gap` says an event after the run
 * was not there to send (pruned, or not in `rows`): the stream cannot go on past it from these rows.
 */
export const nextRun = <R extends { readonly id: number }>(
  cursor: number,
  rows: ReadonlyArray<R>
): { readonly run: ReadonlyArray<R>; readonly gap: boolean } => {
  let start = 0
  while (start < rows.length && rows[start]!.id <= cursor) start++
  if (start === rows.length) return { run: [], gap: false }
  if (rows[start]!.id !== cursor + 1) return { run: [], gap: true }
  let end = start + 1
  while (end < rows.length && rows[end]!.id === rows[end - 1]!.id + 1) end++
  return { run: rows.slice(start, end), gap: end < rows.length }
}
