/**
 * A list read a page at a time, newest first, with the API's `before` cursor (the id of the last
 * item shown), read again when the connection comes back, and kept current by live events.
 */
import { type Signal, useSignal } from "@preact/signals"
import type { Effect } from "effect"
import { useEffect } from "preact/hooks"
import { run } from "./api.js"
import { reconnections } from "./connection.js"
import { type LiveEvent, onLiveEvent } from "./live.js"
import { useAction } from "./ui.js"

export const PAGE_SIZE = 20

export const usePagedList = <Item extends { readonly id: string }, E>(
  readPage: (query: { readonly limit: number; readonly before?: string }) => Effect.Effect<ReadonlyArray<Item>, E>,
  /** What a live event does to the list (add or replace an item), or nothing. */
  onEvent: (event: LiveEvent, items: Signal<ReadonlyArray<Item>>) => void
) => {
  const items = useSignal<ReadonlyArray<Item>>([])
  const more = useSignal(false)
  const loaded = useSignal(false)
  const { busy, error, perform } = useAction()
  const load = (before?: string) =>
    perform(async () => {
      const page = await run(readPage({ limit: PAGE_SIZE, ...(before === undefined ? {} : { before }) }))
      items.value = before === undefined ? page : [...items.value, ...page]
      more.value = page.length === PAGE_SIZE
      loaded.value = true
    })
  useEffect(() => {
    void load()
  }, [reconnections.value])
  useEffect(() => onLiveEvent((event) => onEvent(event, items)), [])
  return {
    items,
    more,
    /** The first page came (an empty list then means there is nothing). */
    loaded,
    busy,
    error,
    loadOlder: () => load(items.value[items.value.length - 1]?.id)
  }
}

/** Puts `item` first, or in its place when the list has it already (a decision that ended). */
export const upsertFirst = <Item extends { readonly id: string }>(items: Signal<ReadonlyArray<Item>>, item: Item) => {
  items.value = items.value.some((known) => known.id === item.id)
    ? items.value.map((known) => (known.id === item.id ? item : known))
    : [item, ...items.value]
}
