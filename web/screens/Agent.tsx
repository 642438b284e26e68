/**
 * The agent: the strategy editor (the API's own validation messages shown at their field), and,
 * while the agent runs (AGENT_MODE dry or live), the portfolio as a chart of weights against
 * targets plus a table, a preview of the decision at a chosen time, the decision log (live) and the
 * agent wallet's session.
 */
import { type Signal, useSignal } from "@preact/signals"
import { useEffect, useRef } from "preact/hooks"
import type { Portfolio, Preview, Strategy } from "../../src/agent/Api.js"
import type { TokenMarket } from "../../src/market/Api.js"
import { api, me } from "../account.js"
import { AppError, fieldMessages, run } from "../api.js"
import { config } from "../config.js"
import { reconnections } from "../connection.js"
import { browserTimeZone, dateTime, percent, shortHex, usd } from "../format.js"
import { onLiveEvent } from "../live.js"
import { upsertFirst, usePagedList } from "../paging.js"
import { Link } from "../router.js"
import { Button, Copyable, ErrorNotice, FieldMessage, ScreenTitle, useAction } from "../ui.js"

type ChartModule = typeof import("../chart.js")

const TIME_ZONES: ReadonlyArray<string> = Intl.supportedValuesOf("timeZone")

/** The strategy's time zone, else the browser's: the zone times are shown in. */
const zoneOf = (strategy: Strategy | undefined) => strategy?.timeZone ?? browserTimeZone()

const fieldMessage = (error: AppError | undefined, field: string) =>
  error?.fields.find((found) => found.field === field)?.message

const StrategyEditor = (props: {
  readonly tokens: ReadonlyArray<TokenMarket>
  readonly strategy: Signal<Strategy | undefined>
  readonly onSaved: () => void
}) => {
  const weights = useSignal<Readonly<Record<string, string>>>({})
  const weekly = useSignal("")
  const zone = useSignal(browserTimeZone())
  const saved = useSignal<string | undefined>(undefined)
  const { busy, error, perform } = useAction()

  useEffect(() => {
    const current = props.strategy.value
    weights.value = Object.fromEntries(
      props.tokens.map((token) => [
        token.symbol,
        current?.targets[token.symbol] === undefined
          ? ""
          : String(Number((current.targets[token.symbol]! * 100).toFixed(4)))
      ])
    )
    weekly.value = String(current?.weeklySpendUsd ?? 0)
    zone.value = current?.timeZone ?? browserTimeZone()
  }, [props.tokens, props.strategy.value])

  const total = Object.values(weights.value).reduce((sum, text) => sum + (Number(text) || 0), 0)
  const save = (event: Event) => {
    event.preventDefault()
    saved.value = undefined
    void perform(async () => {
      if (weekly.value.trim() === "" || Number.isNaN(Number(weekly.value))) {
        const message = "weeklySpendUsd: enter an amount in USD, 0 or more"
        throw new AppError(message, "INVALID", undefined, fieldMessages(message))
      }
      const targets = Object.fromEntries(
        Object.entries(weights.value)
          .filter(([, text]) => text.trim() !== "" && Number(text) !== 0)
          .map(([symbol, text]) => [symbol, Number(text) / 100])
      )
      const strategy = await run(
        api().strategy.put({
          payload: {
            targets,
            weeklySpendUsd: Number(weekly.value),
            timeZone: zone.value
          }
        })
      )
      props.strategy.value = strategy
      saved.value = `Strategy saved ${dateTime(strategy.updatedAt, strategy.timeZone)}.`
      props.onSaved()
    })
  }

  const targetsMessage = fieldMessage(error.value, "targets")
  const weeklyMessage = fieldMessage(error.value, "weeklySpendUsd")
  const zoneMessage = fieldMessage(error.value, "timeZone")
  const placed = (field: string) => /^(targets(\..+)?|weeklySpendUsd|timeZone)$/.test(field)
  const unplaced = error.value !== undefined && !error.value.fields.some((found) => placed(found.field))
  return (
    <form class="strategy" onSubmit={save} noValidate aria-labelledby="strategy-title">
      <h2 id="strategy-title">Strategy</h2>
      <p>
        The agent keeps your card funded by selling from its wallet of stock tokens. Give each token a target share of
        the wallet (they must add up to 100 %), what you expect to spend on the card in a week, and the time zone of
        your week.
      </p>
      <fieldset
        aria-describedby={targetsMessage === undefined ? "weights-total" : "weights-total targets-message"}
        aria-invalid={targetsMessage !== undefined}
      >
        <legend>Target weights (%)</legend>
        <div class="weights">
          {props.tokens.map((token) => {
            const message = fieldMessage(error.value, `targets.${token.symbol}`)
            const id = `weight-${token.symbol}`
            return (
              <div class="field" key={token.symbol}>
                <label for={id}>{token.symbol}</label>
                <input
                  id={id}
                  name={id}
                  type="number"
                  inputMode="decimal"
                  min={0}
                  max={100}
                  step="any"
                  value={weights.value[token.symbol] ?? ""}
                  aria-invalid={message !== undefined}
                  aria-describedby={message === undefined ? undefined : `${id}-message`}
                  onInput={(event) =>
                    (weights.value = { ...weights.value, [token.symbol]: (event.target as HTMLInputElement).value })
                  }
                />
                <FieldMessage id={`${id}-message`} message={message} />
              </div>
            )
          })}
        </div>
        <p id="weights-total" class="small-print">
          Total: {Number(total.toFixed(4))} %
        </p>
        <FieldMessage id="targets-message" message={targetsMessage} />
      </fieldset>
      <div class="field">
        <label for="weeklySpendUsd">Weekly card spend (USD)</label>
        <input
          id="weeklySpendUsd"
          type="number"
          inputMode="decimal"
          min={0}
          step="any"
          value={weekly.value}
          aria-invalid={weeklyMessage !== undefined}
          aria-describedby={weeklyMessage === undefined ? undefined : "weeklySpendUsd-message"}
          onInput={(event) => (weekly.value = (event.target as HTMLInputElement).value)}
        />
        <FieldMessage id="weeklySpendUsd-message" message={weeklyMessage} />
      </div>
      <div class="field">
        <label for="timeZone">Time zone</label>
        <select
          id="timeZone"
          value={zone.value}
          aria-invalid={zoneMessage !== undefined}
          aria-describedby={zoneMessage === undefined ? undefined : "timeZone-message"}
          onChange={(event) => (zone.value = (event.target as HTMLSelectElement).value)}
        >
          {(TIME_ZONES.includes(zone.value) ? TIME_ZONES : [zone.value, ...TIME_ZONES]).map((name) => (
            <option key={name} value={name}>
              {name}
            </option>
          ))}
        </select>
        <FieldMessage id="timeZone-message" message={zoneMessage} />
      </div>
      {unplaced ? <ErrorNotice error={error.value} /> : null}
      <div class="actions">
        <button type="submit" class="primary" disabled={busy.value} aria-busy={busy.value}>
          Save the strategy
        </button>
      </div>
      {saved.value === undefined ? null : (
        <p role="status" class="saved">
          {saved.value}
        </p>
      )}
    </form>
  )
}

const marketCell = (market: TokenMarket["market"], timeZone: string) => {
  if (market === null) return <span>—</span>
  const { status } = market
  return (
    <span>
      <span class={status.openState ? "open" : "closed"}>{status.openState ? "Open" : "Closed"}</span>
      {status.marketStatus === null ? "" : ` (${status.marketStatus})`}
      {status.nextOpenTime === null ? null : (
        <span class="small-print"> · next open {dateTime(status.nextOpenTime, timeZone)}</span>
      )}
    </span>
  )
}

const PortfolioSection = (props: {
  readonly portfolio: Portfolio | undefined
  readonly error: AppError | undefined
  readonly timeZone: string
  readonly chart: ChartModule | undefined
}) => {
  const { portfolio } = props
  return (
    <section aria-labelledby="portfolio-title">
      <h2 id="portfolio-title">Portfolio</h2>
      <ErrorNotice error={props.error} />
      {portfolio === undefined && props.error === undefined ? (
        <p>The agent wallet's holdings appear here once your strategy is set.</p>
      ) : null}
      {portfolio === undefined ? null : (
        <>
          <p>
            Agent wallet{" "}
            <Copyable value={portfolio.wallet} label="the agent wallet's address" shown={shortHex(portfolio.wallet)} />{" "}
            worth <strong>{usd(portfolio.totalUsd)}</strong>; the card holds {usd(portfolio.card.usd1)} USD1.
          </p>
          {props.chart === undefined ? null : (
            <props.chart.PortfolioChart
              holdings={portfolio.holdings.map((holding) => ({
                symbol: holding.symbol,
                weight: holding.weight,
                target: holding.target
              }))}
            />
          )}
          {/* biome-ignore lint/a11y/noNoninteractiveTabindex: a region that scrolls must be reachable by keyboard */}
          <section class="table-scroll" tabIndex={0} aria-label="Holdings">
            <table class="holdings">
              <caption class="visually-hidden">Holdings of the agent wallet</caption>
              <thead>
                <tr>
                  <th scope="col">Token</th>
                  <th scope="col">Balance</th>
                  <th scope="col">Value</th>
                  <th scope="col">Weight</th>
                  <th scope="col">Target</th>
                  <th scope="col">Market ({props.timeZone})</th>
                  <th scope="col">Spread vs close</th>
                </tr>
              </thead>
              <tbody>
                {portfolio.holdings.map((holding) => (
                  <tr key={holding.symbol}>
                    <th scope="row">{holding.symbol}</th>
                    <td>{Number(holding.balance).toLocaleString("en-US", { maximumFractionDigits: 4 })}</td>
                    <td>{usd(holding.valueUsd)}</td>
                    <td>{percent(holding.weight)}</td>
                    <td>{percent(holding.target)}</td>
                    <td>{holding.market === null ? "Cash" : marketCell(holding.market, props.timeZone)}</td>
                    <td>
                      {holding.market?.spreadVsClose === null || holding.market === null
                        ? "—"
                        : percent(holding.market.spreadVsClose, 2)}
                    </td>
                  </tr>
                ))}
              </tbody>
            </table>
          </section>
        </>
      )}
    </section>
  )
}

/** A datetime-local value (the browser's zone) one hour from now. */
const inAnHour = () => {
  const at = new Date(Date.now() + 3_600_000)
  at.setSeconds(0, 0)
  return new Date(at.getTime() - at.getTimezoneOffset() * 60_000).toISOString().slice(0, 16)
}

const PreviewSection = (props: { readonly timeZone: string }) => {
  const at = useSignal(inAnHour())
  const preview = useSignal<Preview | undefined>(undefined)
  const { busy, error, perform } = useAction()
  const ask = (event: Event) => {
    event.preventDefault()
    void perform(async () => {
      const instant = new Date(at.value).getTime()
      preview.value = await run(
        api().agent.preview({ urlParams: { at: Number.isNaN(instant) ? Date.now() : instant } })
      )
    })
  }
  const decision = preview.value?.decision
  return (
    <form onSubmit={ask} aria-labelledby="preview-title">
      <h2 id="preview-title">Preview a decision</h2>
      <p>What the agent would decide at another time, with today's balances and prices. It never trades.</p>
      <div class="field">
        <label for="preview-at">Date and time ({browserTimeZone()})</label>
        <input
          id="preview-at"
          type="datetime-local"
          value={at.value}
          onInput={(event) => (at.value = (event.target as HTMLInputElement).value)}
        />
      </div>
      <div class="actions">
        <button type="submit" disabled={busy.value} aria-busy={busy.value}>
          Preview
        </button>
      </div>
      <ErrorNotice error={error.value} />
      {preview.value === undefined || decision === undefined ? null : (
        <div class="preview" role="status">
          <p>
            At {dateTime(preview.value.at, props.timeZone)}: <strong>{decision.action}</strong>
            {"symbol" in decision ? ` ${usd(decision.usd)} from ${decision.symbol}` : ""}
          </p>
          <p>{decision.reason}</p>
          <p class="small-print">
            Forecast need {usd(decision.needUsd)} until {dateTime(decision.horizon, props.timeZone)}.
          </p>
        </div>
      )}
    </form>
  )
}

const DecisionLog = (props: { readonly timeZone: string }) => {
  const {
    items: decisions,
    more,
    loaded,
    busy,
    error,
    loadOlder
  } = usePagedList(
    (query) => api().agent.decisions({ urlParams: query }),
    (event, list) => {
      if (event.event === "decision") upsertFirst(list, event.data)
    }
  )
  return (
    <section aria-labelledby="decisions-title">
      <h2 id="decisions-title">Decision log</h2>
      <ErrorNotice error={error.value} />
      {loaded.value && decisions.value.length === 0 ? <p>No decision yet.</p> : null}
      <ol class="decisions">
        {decisions.value.map((decision) => (
          <li key={decision.id} class={`decision ${decision.status}`}>
            <p>
              <time dateTime={new Date(decision.at).toISOString()}>{dateTime(decision.at, props.timeZone)}</time>{" "}
              <strong>{decision.action}</strong>
              {decision.usd === null ? "" : ` ${usd(decision.usd)}`}
              {decision.symbol === null ? "" : ` from ${decision.symbol}`} ·{" "}
              <span class="status">{decision.status}</span>
            </p>
            <p>{decision.reason}</p>
            {decision.error === null ? null : <p class="field-message">{decision.error}</p>}
            {decision.txs.map((tx) => (
              <Copyable key={tx} value={tx} label="the transaction hash" shown={shortHex(tx, 10)} />
            ))}
          </li>
        ))}
      </ol>
      {more.value ? (
        <Button busy={busy.value} onClick={loadOlder}>
          Load older decisions
        </Button>
      ) : null}
    </section>
  )
}

const WalletSession = () => {
  const state = useSignal<{ readonly connected: boolean; readonly expiresAt?: number | undefined } | undefined>(
    undefined
  )
  const { error, perform } = useAction()
  useEffect(() => {
    void perform(async () => {
      state.value = await run(api().agent.session())
    })
  }, [reconnections.value])
  return (
    <section aria-labelledby="session-title">
      <h2 id="session-title">Agent wallet session</h2>
      <ErrorNotice error={error.value} />
      {state.value === undefined ? null : (
        <p>
          {state.value.connected ? "Connected: the agent can trade." : "Not connected: the agent cannot trade."}
          {state.value.expiresAt === undefined ? "" : ` The session lasts until ${dateTime(state.value.expiresAt)}.`}
        </p>
      )}
    </section>
  )
}

export const Agent = () => {
  const tokens = useSignal<ReadonlyArray<TokenMarket>>([])
  const strategy = useSignal<Strategy | undefined>(undefined)
  const portfolio = useSignal<Portfolio | undefined>(undefined)
  const portfolioError = useSignal<AppError | undefined>(undefined)
  const chart = useSignal<ChartModule | undefined>(undefined)
  const { error, perform } = useAction()
  const agentOn = config.agent !== "off"
  const hasCard = me.value?.card !== null && me.value?.card !== undefined

  // Reads overlap (the screen opening, a save, events): only the latest one's answer is shown.
  const portfolioReads = useRef(0)
  const loadPortfolio = async () => {
    if (!agentOn || !hasCard) return
    const read = ++portfolioReads.current
    try {
      const answer = await run(api().agent.portfolio())
      if (read !== portfolioReads.current) return
      portfolio.value = answer
      portfolioError.value = undefined
    } catch (failure) {
      if (read === portfolioReads.current) portfolioError.value = failure as AppError
    }
  }

  useEffect(() => {
    if (!hasCard) return
    void perform(async () => {
      tokens.value = await run(api().market.tokens())
      try {
        strategy.value = await run(api().strategy.get())
      } catch (failure) {
        if ((failure as AppError).code !== "STRATEGY_NOT_FOUND") throw failure
      }
    })
    void loadPortfolio()
  }, [reconnections.value, hasCard])
  useEffect(() => {
    if (agentOn) void import("../chart.js").then((module) => (chart.value = module))
  }, [])
  useEffect(
    () =>
      onLiveEvent((event) => {
        if (event.event === "strategy") strategy.value = event.data
        if (event.event === "refill" || event.event === "strategy" || event.event === "payment") void loadPortfolio()
      }),
    []
  )

  if (!hasCard) {
    return (
      <section aria-labelledby="screen-title">
        <ScreenTitle>Agent</ScreenTitle>
        <p>The agent serves cards: pass the identity check first.</p>
        <Link class="button primary" href="/app/identity">
          Go to the identity check
        </Link>
      </section>
    )
  }
  const timeZone = zoneOf(strategy.value)
  return (
    <div>
      <ScreenTitle>Agent</ScreenTitle>
      <ErrorNotice error={error.value} />
      <StrategyEditor tokens={tokens.value} strategy={strategy} onSaved={() => void loadPortfolio()} />
      {agentOn ? (
        <>
          <PortfolioSection
            portfolio={strategy.value === undefined ? undefined : portfolio.value}
            error={portfolioError.value}
            timeZone={timeZone}
            chart={chart.value}
          />
          <PreviewSection timeZone={timeZone} />
          <DecisionLog timeZone={timeZone} />
          <WalletSession />
        </>
      ) : (
        <p class="notice">
          The agent is off on this service (AGENT_MODE=off): your strategy is kept and used once it runs. Its portfolio,
          decisions and previews appear here then.
        </p>
      )}
    </div>
  )
}
