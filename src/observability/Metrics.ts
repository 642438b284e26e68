/**
 * Metrics: what the service counts, and the Prometheus text rendering of every Effect metric (served
 * at `GET /metrics` by http/MetricsRoute.ts; the same metrics go out over OTLP when a collector is configured).
 *
 * | metric | kind | labels |
 * |---|---|---|
 * | `http_requests_total` | counter | `method`, `route` (the endpoint's path template), `status` |
 * | `http_request_duration_seconds` | histogram | `method`, `route` |
 * | `merchant_settlements_total` | counter | `outcome` (`settled`, `failed`, `deferred`) |
 * | `merchant_settlements_reverted_total` | counter | – |
 * | `kyc_transitions_total` | counter | `from`, `to` |
 * | `agent_decisions_total` | counter | `action`, `status` |
 * | `agent_tick_duration_seconds` | histogram | – |
 * | `db_pool_connections` | gauge | `state` (`total`, `idle`, `waiting`) |
 * | `events_open_streams` | gauge | – (this replica's `GET /me/events` streams) |
 * | `events_sent_total` | counter | `type` (`ready`, `kyc`, `payment`, `refill`, `decision`, `strategy`, `close`) |
 * | `events_streams_closed_total` | counter | `reason` (`client`, `shutdown`, `signed-out`, `session-expired`, `replaced`, `events-expired`, `idle`, `too-slow`) |
 * | `events_streams_refused_total` | counter | `cap` (`client`: 429, one client address's streams; `replica`: 503, this replica's) |
 * | `events_notification_lag_seconds` | histogram | – (an event's commit to its read by a notified replica) |
 * | `chain_rpc_endpoint_up` | gauge | `endpoint` (position in CHAIN_RPC_URL, from 1), `host` (never the path or credentials) |
 * | `chain_rpc_endpoint_latency_seconds` | gauge | `endpoint`, `host` (mean of the recent probes; several endpoints only) |
 * | `chain_rpc_endpoint_degraded` | gauge | `endpoint`, `host` (1 while in a backoff after its own fault: a rate limit, a server error) |
 * | `chain_rpc_requests_total` | counter | `endpoint`, `host`, `outcome` (`answered`, `unreachable`, `endpoint-error`: its own error, a rate limit, server error or method unavailable, to a call or a probe) |
 * | `chain_rpc_failovers_total` | counter | – (reads that went on to the next endpoint) |
 * | `card_balance_follower_block` | gauge | – (the block up to which the card wallets' balances are followed, as this replica last saw it) |
 * | `card_balance_follower_checked_timestamp_seconds` | gauge | – (when the follower last checked them, Unix time: alert on its age above CARD_BALANCE_MAX_AGE) |
 * | `card_balance_refreshes_total` | counter | `reason` (`start`, `schedule`, `behind`, `went-back`) |
 * | `card_authorizations_total` | counter | `decision` (`approved`, `declined`), `reason` (a decline reason, or `none`) |
 * | `card_authorization_decision_seconds` | histogram | – (a card-network request's answer, stand-ins included) |
 * | `card_authorization_stand_ins_total` | counter | `cause` (`deadline`: past CARD_AUTHORIZATION_BUDGET, `failure`: a fault of ours or the database's) |
 * | `card_transfers_total` | counter | `kind` (`debit`, `refund`), `event` (`sent`, `mined`, `bumped`, `resent`: after a reorg, `reverted`) |
 * | `card_reconcile_clearings`, `card_reconcile_debited`, `card_reconcile_owed`, `card_reconcile_pending`, `card_reconcile_refunds` | gauge | – (counts, as the last reconciliation found them) |
 * | `card_reconcile_owed_outstanding_usd` | gauge | – (what the cards still owe the program) |
 * | `card_reconcile_differences` | gauge | `kind` (every kind, 0 when none) |
 * | `card_reconcile_last_run_timestamp_seconds` | gauge | – (when the last reconciliation finished, Unix time) |
 *
 * Beside them: Effect's runtime metrics (`effect_fiber_*`) and the process's own (ProcessMetrics.ts).
 */
import { HttpApi, type HttpApiGroup, type HttpServerResponse } from "@effect/platform"
import { Cause, Effect, Exit, Metric, MetricBoundaries, MetricLabel, type MetricPair, Option } from "effect"
import type { DatabasePool } from "../storage/Database.js"
import { processMetrics } from "./ProcessMetrics.js"

const requests = Metric.counter("http_requests_total", { description: "HTTP requests answered" })
const requestDuration = Metric.histogram(
  "http_request_duration_seconds",
  MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 16 }),
  "Time to answer an HTTP request"
)
const settlements = Metric.counter("merchant_settlements_total", { description: "x402 settlements, by outcome" })
const settlementsReverted = Metric.counter("merchant_settlements_reverted_total", {
  description: "Settlement transactions mined reverted: gas the relayer paid for nothing"
})
const nonceGaps = Metric.counter("relayer_nonce_gap_transactions_total", {
  description:
    "Nonces of the relayer found missing on chain and sent again (resent) or filled (filled), each once per gap however many checks find it open"
})
const lostTransactions = Metric.counter("relayer_transactions_lost_total", {
  description: "Relayed transactions seen mined and later no longer on the canonical chain"
})
const revertedRelayerTransactions = Metric.counter("relayer_transactions_reverted_total", {
  description:
    "Relayer transactions mined reverted (gas paid for nothing), whatever sent them: each once per block it is mined in"
})
const feeBumps = Metric.counter("relayer_fee_bumps_total", {
  description: "Relayed transactions not mined in time, replaced with the same nonce and a higher fee"
})
const relayerFunded = Metric.gauge("relayer_gas_funded", {
  description: "Whether a relayer key's gas balance, as last read, pays its next transaction (1) or not (0)"
})
const relayerGasBalance = Metric.gauge("relayer_gas_balance_wei", {
  description: "A relayer key's gas balance as last read (less what it signed since), in wei"
})
const baseFeeAboveCap = Metric.gauge("relayer_base_fee_above_cap", {
  description:
    "Whether the chain's base fee at the last head is above MAX_FEE_PER_GAS (1): relayer transactions wait, at most RELAYER_MAX_IN_FLIGHT a key"
})
const lostAgentTransactions = Metric.counter("agent_transactions_lost_total", {
  description: "Agent wallet transactions seen mined and later no longer on the canonical chain"
})
const kycTransitions = Metric.counter("kyc_transitions_total", { description: "Identity-check state changes" })
const agentDecisions = Metric.counter("agent_decisions_total", {
  description: "Agent decisions stored, by action and status"
})
export const agentTickDuration = Metric.histogram(
  "agent_tick_duration_seconds",
  MetricBoundaries.exponential({ start: 0.01, factor: 2, count: 14 }),
  "Duration of one agent loop tick"
)
export const agentTickOverruns = Metric.counter("agent_tick_overruns_total", {
  description: "Agent loop ticks that took longer than AGENT_INTERVAL"
})
const dbPoolConnections = Metric.gauge("db_pool_connections", {
  description: "PostgreSQL pool connections, by state"
})

const openStreams = Metric.gauge("events_open_streams", { description: "Open event streams on this replica" })
const eventsSent = Metric.counter("events_sent_total", { description: "Events sent on event streams, by type" })
const streamsClosed = Metric.counter("events_streams_closed_total", {
  description: "Event streams ended, by reason"
})
const streamsRefused = Metric.counter("events_streams_refused_total", {
  description: "New event streams refused, by the cap that refused them"
})
const notificationLag = Metric.histogram(
  "events_notification_lag_seconds",
  MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 14 }),
  "From an event's write to its read by a replica told about it (database clock)"
)

const rpcEndpointUp = Metric.gauge("chain_rpc_endpoint_up", {
  description: "Whether a chain JSON-RPC endpoint is in use (1), or down, not yet checked or on another chain (0)"
})
const rpcEndpointLatency = Metric.gauge("chain_rpc_endpoint_latency_seconds", {
  description: "Mean latency of a chain JSON-RPC endpoint's recent probes"
})
const rpcEndpointDegraded = Metric.gauge("chain_rpc_endpoint_degraded", {
  description:
    "Whether a chain JSON-RPC endpoint is in a backoff after its own fault (1: rate limit or server error; reads go elsewhere first)"
})
const rpcRequests = Metric.counter("chain_rpc_requests_total", {
  description:
    "Chain JSON-RPC calls per endpoint: answered (the chain's JSON-RPC error too), unreachable, or the endpoint's own error",
  incremental: true
})
const rpcFailovers = Metric.counter("chain_rpc_failovers_total", {
  description: "Chain reads that went on to the next endpoint after one did not answer",
  incremental: true
})

const balanceFollowerBlock = Metric.gauge("card_balance_follower_block", {
  description: "The block up to which the card wallets' USD1 balances are followed, as this replica last saw it"
})
const balanceFollowerChecked = Metric.gauge("card_balance_follower_checked_timestamp_seconds", {
  description: "When the card wallets' USD1 balances were last checked against the chain's head (Unix time)"
})
const balanceRefreshes = Metric.counter("card_balance_refreshes_total", {
  description: "Full reads of every card wallet's USD1 balance by this replica, by reason"
})

const cardAuthorizations = Metric.counter("card_authorizations_total", {
  description: "Card authorization requests answered, by decision and decline reason"
})
const cardAuthorizationDecision = Metric.histogram(
  "card_authorization_decision_seconds",
  MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 12 }),
  "Time to answer a card network's authorization request"
)
const cardAuthorizationStandIns = Metric.counter("card_authorization_stand_ins_total", {
  description: "Card authorizations answered with the configured stand-in, by cause"
})
const cardTransfers = Metric.counter("card_transfers_total", {
  description: "The settlement account's transfers of clearings (debits) and refunds, by what happened to them"
})

const reconcileClearings = Metric.gauge("card_reconcile_clearings", {
  description: "Clearings the card network sent, as the last card reconciliation counted them"
})
const reconcileDebited = Metric.gauge("card_reconcile_debited", {
  description: "Clearings debited from the card wallet on chain, as the last card reconciliation counted them"
})
const reconcileOwed = Metric.gauge("card_reconcile_owed", {
  description:
    "Clearings that could not be debited (owed, repaid since or not), as the last card reconciliation counted them"
})
const reconcilePending = Metric.gauge("card_reconcile_pending", {
  description: "Clearings neither debited nor owed yet, as the last card reconciliation counted them"
})
const reconcileRefunds = Metric.gauge("card_reconcile_refunds", {
  description: "Refunds the card network sent, as the last card reconciliation counted them"
})
const reconcileOutstanding = Metric.gauge("card_reconcile_owed_outstanding_usd", {
  description: "What the cards still owe the card program, as the last card reconciliation read it"
})
const reconcileDifferences = Metric.gauge("card_reconcile_differences", {
  description: "Unexplained differences the last card reconciliation found, by kind"
})
const reconcileLastRun = Metric.gauge("card_reconcile_last_run_timestamp_seconds", {
  description: "When the last card reconciliation finished (Unix time)"
})

/**
 * One chain endpoint's series, labelled by its position and host (an RPC URL's path and
 * credentials often hold an API key: they are never a label). Label arrays are made once.
 */
export const rpcEndpointMetrics = (endpoint: number, host: string) => {
  const labels = [MetricLabel.make("endpoint", String(endpoint)), MetricLabel.make("host", host)]
  const outcomes = {
    answered: [...labels, MetricLabel.make("outcome", "answered")],
    unreachable: [...labels, MetricLabel.make("outcome", "unreachable")],
    "endpoint-error": [...labels, MetricLabel.make("outcome", "endpoint-error")]
  }
  return {
    up: (up: boolean) => rpcEndpointUp.unsafeUpdate(up ? 1 : 0, labels),
    degraded: (degraded: boolean) => rpcEndpointDegraded.unsafeUpdate(degraded ? 1 : 0, labels),
    latency: (ms: number) => rpcEndpointLatency.unsafeUpdate(ms / 1000, labels),
    call: (outcome: keyof typeof outcomes) => rpcRequests.unsafeUpdate(1, outcomes[outcome]),
    failover: () => rpcFailovers.unsafeUpdate(1, [])
  }
}

export const setOpenStreams = (count: number) => Metric.set(openStreams, count)

export const countEventsSent = (type: string, count: number) =>
  Metric.incrementBy(Metric.tagged(eventsSent, "type", type), count)

export const countStreamClosed = (reason: string) => Metric.increment(Metric.tagged(streamsClosed, "reason", reason))

export const countStreamRefused = (cap: "client" | "replica") =>
  Metric.increment(Metric.tagged(streamsRefused, "cap", cap))

export const recordNotificationLag = (seconds: ReadonlyArray<number>) =>
  Effect.sync(() => {
    for (const value of seconds) notificationLag.unsafeUpdate(value, [])
  })

/**
 * `settled` and `failed` when a settlement is recorded (by the request or the reconciler),
 * `deferred` when the paying request hands an unfinished one to the reconciler.
 */
export const countSettlement = (outcome: "settled" | "failed" | "deferred") =>
  Metric.increment(Metric.tagged(settlements, "outcome", outcome))

/** A settlement transaction was mined reverted (counted once, where the receipt is judged). */
export const countRevertedSettlement = Metric.increment(settlementsReverted)

export const countNonceGap = (resent: number, filled: number) =>
  Effect.all([
    Metric.incrementBy(Metric.tagged(nonceGaps, "action", "resent"), resent),
    Metric.incrementBy(Metric.tagged(nonceGaps, "action", "filled"), filled)
  ])

export const countLostTransaction = Metric.increment(lostTransactions)

export const countFeeBump = Metric.increment(feeBumps)

export const countRevertedRelayerTransaction = (relayer: string) =>
  Metric.increment(Metric.tagged(revertedRelayerTransactions, "relayer", relayer))

/** A relayer key's gas, as its watch last saw it. */
export const relayerGasMetrics = (relayer: string) => {
  const labels = [MetricLabel.make("relayer", relayer)]
  return {
    funded: (funded: boolean) => relayerFunded.unsafeUpdate(funded ? 1 : 0, labels),
    balance: (wei: bigint) => relayerGasBalance.unsafeUpdate(Number(wei), labels)
  }
}

/** Whether the base fee the relayer last saw is above its cap. */
export const setBaseFeeAboveCap = (above: boolean) => Metric.set(baseFeeAboveCap, above ? 1 : 0)

export const countLostAgentTransaction = Metric.increment(lostAgentTransactions)

/** The card balance follower's view: its block and when it was checked. */
export const setBalanceFollower = (block: bigint, checkedAt: Date) =>
  Effect.all([
    Metric.set(balanceFollowerBlock, Number(block)),
    Metric.set(balanceFollowerChecked, checkedAt.getTime() / 1000)
  ])

/** The last card reconciliation's figures: every kind of difference is set, 0 when none was found. */
export const setCardReconciliation = (
  summary: {
    readonly clearings: { readonly count: number }
    readonly debited: { readonly count: number }
    readonly owed: { readonly count: number; readonly outstandingMicros: number }
    readonly pending: { readonly count: number }
    readonly refunds: { readonly count: number }
    readonly differences: ReadonlyArray<{ readonly kind: string }>
  },
  kinds: ReadonlyArray<string>,
  finishedAtMs: number
) =>
  Effect.all([
    Metric.set(reconcileClearings, summary.clearings.count),
    Metric.set(reconcileDebited, summary.debited.count),
    Metric.set(reconcileOwed, summary.owed.count),
    Metric.set(reconcilePending, summary.pending.count),
    Metric.set(reconcileRefunds, summary.refunds.count),
    Metric.set(reconcileOutstanding, summary.owed.outstandingMicros / 1e6),
    ...kinds.map((kind) =>
      Metric.set(
        Metric.tagged(reconcileDifferences, "kind", kind),
        summary.differences.filter((difference) => difference.kind === kind).length
      )
    ),
    Metric.set(reconcileLastRun, finishedAtMs / 1000)
  ])

export const countBalanceRefresh = (reason: string) =>
  Metric.increment(Metric.tagged(balanceRefreshes, "reason", reason))

export const countKycTransition = (from: string, to: string) =>
  Metric.increment(Metric.tagged(Metric.tagged(kycTransitions, "from", from), "to", to))

export const countAgentDecision = (action: string, status: string) =>
  Metric.increment(Metric.tagged(Metric.tagged(agentDecisions, "action", action), "status", status))

// ---------------------------------------------------------------------------------------------------
// Routes

/** A path template's segments, `undefined` where a parameter (`:id`) matches any segment. */
const segmentsOf = (template: string) => template.split("/").map((part) => (part.startsWith(":") ? undefined : part))

/**
 * The route template of a request path among the API's endpoints, so that metrics carry a bounded
 * set of labels whatever paths clients send; `unmatched` for everything else. Templates are looked
 * up by method and segment count, so a request compares its path with a few candidates only.
 */
export const routeTemplates = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
) => {
  const candidates = new Map<string, Array<{ readonly template: string; readonly parts: Array<string | undefined> }>>()
  const add = (method: string, template: string) => {
    const parts = segmentsOf(template)
    const key = `${method} ${parts.length}`
    const list = candidates.get(key) ?? []
    list.push({ template, parts })
    candidates.set(key, list)
  }
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => add(endpoint.method, endpoint.path)
  })
  for (const template of ["/docs", "/openapi.json", "/metrics"]) add("GET", template)
  return (method: string, path: string) => {
    const query = path.indexOf("?")
    const segments = (query === -1 ? path : path.slice(0, query)).split("/")
    const found = candidates
      .get(`${method} ${segments.length}`)
      ?.find((route) => route.parts.every((part, i) => part === undefined || part === segments[i]))
    return found?.template ?? "unmatched"
  }
}

/** The status a request that ended without a response is counted under. */
export const statusOfExit = (exit: Exit.Exit<HttpServerResponse.HttpServerResponse, unknown>) =>
  Exit.isSuccess(exit) ? exit.value.status : Cause.isInterruptedOnly(exit.cause) ? 499 : 500

/**
 * Counts and times a request by method, route template and status: `(method, url, status,
 * seconds)`, called once per answered request. Each label set's arrays are made once and passed
 * as they are: the metric registry caches its series by the array's identity, so an update finds
 * it without building or hashing a key (`Metric.tagged` copies its labels on every update).
 */
export const requestMetrics = (routeOf: (method: string, path: string) => string) => {
  const series = new Map<
    string,
    { readonly count: ReadonlyArray<MetricLabel.MetricLabel>; readonly time: ReadonlyArray<MetricLabel.MetricLabel> }
  >()
  return (method: string, url: string, status: number, seconds: number) => {
    const route = routeOf(method, url)
    const key = `${method} ${route} ${status}`
    let found = series.get(key)
    if (found === undefined) {
      const time = [MetricLabel.make("method", method), MetricLabel.make("route", route)]
      found = { count: [...time, MetricLabel.make("status", String(status))], time }
      series.set(key, found)
    }
    requests.unsafeUpdate(1, found.count)
    requestDuration.unsafeUpdate(seconds, found.time)
  }
}

// ---------------------------------------------------------------------------------------------------
// Prometheus text format

const escapeLabel = (value: string) => value.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')

const labels = (tags: ReadonlyArray<{ readonly key: string; readonly value: string }>, extra: string = "") => {
  const rendered = tags.map((tag) => `${tag.key}="${escapeLabel(tag.value)}"`)
  if (extra !== "") rendered.push(extra)
  return rendered.length === 0 ? "" : `{${rendered.join(",")}}`
}

const number = (value: number | bigint) =>
  typeof value === "bigint" ? value.toString() : Number.isFinite(value) ? String(value) : value > 0 ? "+Inf" : "-Inf"

/**
 * A counter's name and type as Prometheus has them: a counter that only counts up is a `counter`
 * named `..._total`; one that may also go down (Effect's `effect_fiber_active`, a counter created
 * without `incremental` whose name does not end in `_total`) is a `gauge`.
 */
const counterFamily = (name: string, keyType: unknown) => {
  const incremental = (keyType as { readonly incremental?: boolean }).incremental === true
  if (name.endsWith("_total")) return { name, type: "counter" }
  return incremental ? { name: `${name}_total`, type: "counter" } : { name, type: "gauge" }
}

/** Every metric in Prometheus' text exposition format (version 0.0.4). */
export const prometheusText = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, { type: string; help: string; lines: Array<string> }>()
  for (const { metricKey, metricState } of pairs) {
    const keyName = metricKey.name.replace(/[^a-zA-Z0-9_:]/g, "_")
    const tags = metricKey.tags.map((tag) => ({ key: tag.key, value: tag.value }))
    const state = metricState as unknown as Record<string, unknown>
    const isCounter = "count" in state && !("sum" in state)
    const { name } = isCounter ? counterFamily(keyName, metricKey.keyType) : { name: keyName }
    const family = (type: string) => {
      const existing = families.get(name)
      if (existing !== undefined) return existing.lines
      const created = { type, help: Option.getOrElse(metricKey.description, () => name), lines: [] as Array<string> }
      families.set(name, created)
      return created.lines
    }
    if ("buckets" in state) {
      const lines = family("histogram")
      // Effect's boundaries end with +Inf, which Prometheus' own `le="+Inf"` bucket below already is.
      for (const [boundary, count] of state.buckets as ReadonlyArray<readonly [number, number]>) {
        if (Number.isFinite(boundary)) lines.push(`${name}_bucket${labels(tags, `le="${number(boundary)}"`)} ${count}`)
      }
      lines.push(`${name}_bucket${labels(tags, 'le="+Inf"')} ${state.count}`)
      lines.push(`${name}_sum${labels(tags)} ${number(state.sum as number)}`)
      lines.push(`${name}_count${labels(tags)} ${state.count}`)
    } else if (isCounter) {
      family(counterFamily(keyName, metricKey.keyType).type).push(
        `${name}${labels(tags)} ${number(state.count as number | bigint)}`
      )
    } else if ("value" in state) {
      family("gauge").push(`${name}${labels(tags)} ${number(state.value as number | bigint)}`)
    }
  }
  return [...families.entries()]
    .flatMap(([name, { help, lines, type }]) => [
      `# HELP ${name} ${escapeLabel(help)}`,
      `# TYPE ${name} ${type}`,
      ...lines
    ])
    .join("\n")
    .concat("\n")
}

/**
 * Every metric of this process as Prometheus scrapes them (the pool sampled at each scrape), then the
 * process's own; served by `GET /metrics` (http/MetricsRoute.ts).
 */
export const metricsScrape = (pool: Pick<DatabasePool["Type"], "usage">) => {
  const processText = processMetrics()
  return Effect.gen(function* () {
    for (const [state, value] of Object.entries(yield* pool.usage)) {
      yield* Metric.set(Metric.tagged(dbPoolConnections, "state", state), value)
    }
    return prometheusText(yield* Metric.snapshot) + processText()
  })
}

export const countAuthorization = (approved: boolean, reason: string | null) =>
  Metric.increment(
    Metric.taggedWithLabels(cardAuthorizations, [
      MetricLabel.make("decision", approved ? "approved" : "declined"),
      MetricLabel.make("reason", reason ?? "none")
    ])
  )

export const recordAuthorizationDecision = (seconds: number) => Metric.update(cardAuthorizationDecision, seconds)

export const countAuthorizationStandIn = (cause: "deadline" | "failure") =>
  Metric.increment(Metric.tagged(cardAuthorizationStandIns, "cause", cause))

export const countCardTransfer = (
  kind: "debit" | "refund",
  event: "sent" | "mined" | "bumped" | "resent" | "reverted"
) => Metric.increment(Metric.tagged(Metric.tagged(cardTransfers, "kind", kind), "event", event))
