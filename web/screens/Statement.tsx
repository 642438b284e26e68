/**
 * The card statement: payments and refills, newest first, a page at a time (the `before` cursor),
 * with new items added live as the stream tells of them.
 */
import { api } from "../account.js"
import { dateTime, shortHex, usd } from "../format.js"
import { upsertFirst, usePagedList } from "../paging.js"
import { Button, Copyable, ErrorNotice, ScreenTitle } from "../ui.js"

export const Statement = () => {
  const { items, more, loaded, busy, error, loadOlder } = usePagedList(
    (query) => api().statement.activity({ urlParams: query }),
    (event, list) => {
      if (event.event === "payment" || event.event === "refill") upsertFirst(list, event.data)
    }
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
        <Button busy={busy.value} onClick={loadOlder}>
          Load older items
        </Button>
      ) : null}
    </section>
  )
}
