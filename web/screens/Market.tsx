/** The US market session now, its next open and close, and each stock token's state and price. */
import { useSignal } from "@preact/signals"
import { useEffect } from "preact/hooks"
import type { MarketStatus as MarketStatusSchema, TokenMarket } from "../../src/market/Api.js"
import { api } from "../account.js"
import { run } from "../api.js"
import { reconnections } from "../connection.js"
import { browserTimeZone, dateTime, percent, usd } from "../format.js"
import { Button, ErrorNotice, ScreenTitle, useAction } from "../ui.js"

type MarketStatus = typeof MarketStatusSchema.Type

const SESSION_NAMES: Readonly<Record<string, string>> = {
  premarket: "pre-market session",
  regular: "regular session",
  postmarket: "after-hours session",
  overnight: "overnight session",
  closed: "closed",
  offhours: "closed",
  pause: "paused",
  paused: "paused"
}

const sessionSentence = (status: MarketStatus) =>
  status.marketStatus === null
    ? "The market's state is unknown."
    : status.marketStatus === "closed" || status.marketStatus === "offhours"
      ? `The US market is closed${status.reasonCode === null ? "" : ` (${status.reasonCode})`}.`
      : `The US market is in its ${SESSION_NAMES[status.marketStatus] ?? status.marketStatus}.`

export const Market = () => {
  const now = useSignal<MarketStatus | undefined>(undefined)
  const tokens = useSignal<ReadonlyArray<TokenMarket>>([])
  const { busy, error, perform } = useAction()
  const zone = browserTimeZone()
  const load = () =>
    perform(async () => {
      const [status, list] = await Promise.all([
        run(api().market.status({ urlParams: {} })),
        run(api().market.tokens())
      ])
      now.value = status
      tokens.value = list
    })
  useEffect(() => {
    void load()
  }, [reconnections.value])
  return (
    <section aria-labelledby="screen-title">
      <ScreenTitle>Market</ScreenTitle>
      <ErrorNotice error={error.value} />
      {now.value === undefined ? null : (
        <div class="market-now">
          <p>
            <strong>{sessionSentence(now.value)}</strong>
          </p>
          <p>
            {now.value.nextOpenTime === null ? null : (
              <>Next regular open: {dateTime(now.value.nextOpenTime, zone)}. </>
            )}
            {now.value.nextCloseTime === null ? null : <>Next close: {dateTime(now.value.nextCloseTime, zone)}.</>}
          </p>
        </div>
      )}
      <div class="actions">
        <Button busy={busy.value} onClick={load}>
          Refresh
        </Button>
      </div>
      {/* biome-ignore lint/a11y/noNoninteractiveTabindex: a region that scrolls must be reachable by keyboard */}
      <section class="table-scroll" tabIndex={0} aria-label="Stock tokens">
        <table class="tokens">
          <caption class="visually-hidden">Stock tokens, their trading state and price</caption>
          <thead>
            <tr>
              <th scope="col">Token</th>
              <th scope="col">State</th>
              <th scope="col">Price</th>
              <th scope="col">Last close</th>
              <th scope="col">Spread vs close</th>
              <th scope="col">Next open ({zone})</th>
              <th scope="col">Next close</th>
            </tr>
          </thead>
          <tbody>
            {tokens.value.map((token) => {
              const market = token.market
              return (
                <tr key={token.symbol}>
                  <th scope="row">
                    {token.symbol}
                    <span class="small-print"> {token.platform}</span>
                  </th>
                  <td>
                    {market === null
                      ? "price unavailable"
                      : `${market.status.openState ? "Open" : "Closed"}${market.status.marketStatus === null ? "" : ` · ${SESSION_NAMES[market.status.marketStatus] ?? market.status.marketStatus}`}`}
                  </td>
                  <td>{market === null ? "—" : usd(market.tokenPrice)}</td>
                  <td>{market?.closeRef == null ? "—" : usd(market.closeRef.price)}</td>
                  <td>{market?.spreadVsClose == null ? "—" : percent(market.spreadVsClose, 2)}</td>
                  <td>{market?.status.nextOpenTime == null ? "—" : dateTime(market.status.nextOpenTime, zone)}</td>
                  <td>{market?.status.nextCloseTime == null ? "—" : dateTime(market.status.nextCloseTime, zone)}</td>
                </tr>
              )
            })}
          </tbody>
        </table>
      </section>
    </section>
  )
}
