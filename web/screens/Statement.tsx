/**
 * The card statement: payments, refills, card payments and refunds, newest first, a page at a time
 * (the `before` cursor), with new items added live as the stream tells of them.
 */
import { api } from "../account.js"
import { dateTime, shortHex, usd } from "../format.js"
import { upsertFirst, usePagedList } from "../paging.js"
import { Button, Copyable, ErrorNotice, ScreenTitle } from "../ui.js"

const WHAT = {
  payment: "Payment",
  refill: "Refill",
  card_payment: "Card payment",
  card_refund: "Refund"
} as const

const STATUS = { pending: "Pending", settled: "Settled", reversed: "Reversed", expired: "Expired" } as const

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
        {items.value.map((item) => {
          const outgoing = item.type === "payment" || item.type === "card_payment"
          return (
            <li key={item.id} class={`activity ${item.type}`} data-tx={item.tx}>
              <div class="activity-main">
                <span class="activity-what">{WHAT[item.type]}</span>
                <span class="activity-description">{item.description}</span>
                <span class={`amount ${outgoing ? "payment" : "refill"}`}>
                  {outgoing ? `−${usd(item.usd)}` : `+${usd(item.usd)}`}
                </span>
              </div>
              <div class="activity-meta">
                <time dateTime={new Date(item.at).toISOString()}>{dateTime(item.at)}</time>
                {"status" in item && item.status !== "settled" ? <span>{STATUS[item.status]}</span> : null}
                {item.tx === undefined ? null : (
                  <Copyable
                    value={item.tx}
                    label={`the transaction hash of this ${WHAT[item.type].toLowerCase()}`}
                    shown={shortHex(item.tx, 10)}
                  />
                )}
              </div>
            </li>
          )
        })}
      </ol>
      {more.value ? (
        <Button busy={busy.value} onClick={loadOlder}>
          Load older items
        </Button>
      ) : null}
    </section>
  )
}
