/**
 * The card statement: payments and refills, newest first, a page at a time (the `before` cursor),
 * with new items added live as the stream tells of them.
 */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import type { ActivityItem } from "../../src/cards/Api.js"
import { api } from "../account.js"
import { run } from "../api.js"
import { reconnections } from "../connection.js"
import { dateTime, shortHex, usd } from "../format.js"
import { onLiveEvent } from "../live.js"
import { Button, Copyable, ErrorNotice, ScreenTitle, useAction } from "../ui.js"

const PAGE = 20

export const Statement = () => {
  const items = useSignal<ReadonlyArray<ActivityItem>>([])
  const more = useSignal(false)
  const loaded = useSignal(false)
  const { busy, error, perform } = useAction()

  const load = (before?: string) =>
    perform(async () => {
      const page = await run(
        api().statement.activity({ urlParams: { limit: PAGE, ...(before === undefined ? {} : { before }) } })
      )
      items.value = before === undefined ? page : [...items.value, ...page]
      more.value = page.length === PAGE
      loaded.value = true
    })

  useEffect(() => {
    void load()
  }, [reconnections.value])
  useEffect(
    () =>
      onLiveEvent((event) => {
        if (event.event !== "payment" && event.event !== "refill") return
        if (items.value.some((item) => item.id === event.data.id)) return
        items.value = [event.data, ...items.value]
      }),
    []
  )

  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Statement</ScreenTitle>
      <ErrorNotice error={error.value} />
      {loaded.value && items.value.length === 0 ? <p>Nothing yet: payments and refills appear here.</p> : null}
      <ol class="statement" aria-label="Payments and refills, newest first">
        {items.value.map((item) => (
          <li key={item.id} class={`activity ${item.type}`} data-tx={item.tx}>
            <div class="activity-main">
              <span class="activity-what">{item.type === "payment" ? "Payment" : "Refill"}</span>
              <span class="activity-description">{item.description}</span>
              <span class={`amount ${item.type}`}>
                {item.type === "payment" ? `−${usd(item.usd)}` : `+${usd(item.usd)}`}
              </span>
            </div>
            <div class="activity-meta">
              <time dateTime={new Date(item.at).toISOString()}>{dateTime(item.at)}</time>
              <Copyable
                value={item.tx}
                label={`the transaction hash of this ${item.type}`}
                shown={shortHex(item.tx, 10)}
              />
            </div>
          </li>
        ))}
      </ol>
      {more.value ? (
        <Button busy={busy.value} onClick={() => load(items.value[items.value.length - 1]?.id)}>
          Load older items
        </Button>
      ) : null}
    </section>
  )
}
