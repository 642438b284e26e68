/**
 * Metrics: what the service counts, and the Prometheus text rendering of every Effect metric (served
 * at `GET /metrics`; the same metrics go out over OTLP when a collector is configured).
 *
 * | metric | kind | labels |
 * |---|---|---|
 * | `http_requests_total` | counter | `method`, `route` (the endpoint's path template), `status` |
 * | `http_request_duration_seconds` | histogram | `method`, `route` |
 * | `merchant_settlements_total` | counter | `outcome` (`settled`, `failed`, `deferred`) |
 * | `kyc_transitions_total` | counter | `from`, `to` |
 * | `agent_decisions_total` | counter | `action`, `status` |
 * | `agent_tick_duration_seconds` | histogram | – |
 * | `db_pool_connections` | gauge | `state` (`total`, `idle`, `waiting`) |
 */
import { HttpApi, type HttpApiGroup, HttpMiddleware, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Cause, Effect, Exit, Metric, MetricBoundaries, type MetricPair, Option } from "effect"
import type { DatabasePool } from "./Database.js"

const requests = Metric.counter("http_requests_total", { description: "HTTP requests answered" })
const requestDuration = Metric.histogram(
  "http_request_duration_seconds",
  MetricBoundaries.exponential({ start: 0.001, factor: 2, count: 16 }),
  "Time to answer an HTTP request"
)
const settlements = Metric.counter("merchant_settlements_total", { description: "x402 settlements, by outcome" })
const kycTransitions = Metric.counter("kyc_transitions_total", { description: "Identity-check state changes" })
const agentDecisions = Metric.counter("agent_decisions_total", {
  description: "Agent decisions stored, by action and status"
})
export const agentTickDuration = Metric.histogram(
  "agent_tick_duration_seconds",
  MetricBoundaries.exponential({ start: 0.01, factor: 2, count: 14 }),
  "Duration of one agent loop tick"
)
const dbPoolConnections = Metric.gauge("db_pool_connections", {
  description: "PostgreSQL pool connections, by state"
})

/**
 * `settled` and `failed` when a settlement is recorded (by the request or the reconciler),
 * `deferred` when the paying request hands an unfinished one to the reconciler.
 */
export const countSettlement = (outcome: "settled" | "failed" | "deferred") =>
  Metric.increment(Metric.tagged(settlements, "outcome", outcome))

export const countKycTransition = (from: string, to: string) =>
  Metric.increment(Metric.tagged(Metric.tagged(kycTransitions, "from", from), "to", to))

export const countAgentDecision = (action: string, status: string) =>
  Metric.increment(Metric.tagged(Metric.tagged(agentDecisions, "action", action), "status", status))

// ---------------------------------------------------------------------------------------------------
// Routes

/** A path template as a matcher: `/merchant/orders/:id/pay` matches `/merchant/orders/abc/pay`. */
const matcherOf = (template: string) => {
  const parts = template.split("/")
  return (segments: ReadonlyArray<string>) =>
    segments.length === parts.length && parts.every((part, i) => part.startsWith(":") || part === segments[i])
}

/**
 * The route template of a request path among the API's endpoints, so that metrics carry a bounded
 * set of labels whatever paths clients send; `unmatched` for everything else.
 */
export const routeTemplates = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
) => {
  const routes: Array<{
    readonly method: string
    readonly template: string
    readonly matches: ReturnType<typeof matcherOf>
  }> = []
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      routes.push({ method: endpoint.method, template: endpoint.path, matches: matcherOf(endpoint.path) })
    }
  })
  for (const template of ["/docs", "/openapi.json", "/metrics"]) {
    routes.push({ method: "GET", template, matches: matcherOf(template) })
  }
  return (method: string, path: string) => {
    const segments = path.split("?")[0]!.split("/")
    return routes.find((route) => route.method === method && route.matches(segments))?.template ?? "unmatched"
  }
}

/** The status a request that ended without a response is counted under. */
const statusOfExit = (exit: Exit.Exit<HttpServerResponse.HttpServerResponse, unknown>) =>
  Exit.isSuccess(exit) ? exit.value.status : Cause.isInterruptedOnly(exit.cause) ? 499 : 500

/**
 * Counts and times every request by method, route template and status. The tagged metrics of each
 * label set are made once: tagging allocates and hashes, and this runs on every request.
 */
export const withRequestMetrics = (routeOf: (method: string, path: string) => string) => {
  const series = new Map<
    string,
    { readonly count: Metric.Metric.Counter<number>; readonly time: typeof requestDuration }
  >()
  const seriesOf = (method: string, route: string, status: number) => {
    const key = `${method} ${route} ${status}`
    let found = series.get(key)
    if (found === undefined) {
      const time = requestDuration.pipe(Metric.tagged("method", method), Metric.tagged("route", route))
      found = {
        count: requests.pipe(
          Metric.tagged("method", method),
          Metric.tagged("route", route),
          Metric.tagged("status", String(status))
        ),
        time
      }
      series.set(key, found)
    }
    return found
  }
  return HttpMiddleware.make((app) =>
    Effect.flatMap(HttpServerRequest.HttpServerRequest, (request) => {
      const started = performance.now()
      return Effect.onExit(app, (exit) => {
        const { count, time } = seriesOf(request.method, routeOf(request.method, request.url), statusOfExit(exit))
        return Effect.zipRight(Metric.increment(count), Metric.update(time, (performance.now() - started) / 1000))
      })
    })
  )
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

/** Every metric in Prometheus' text exposition format (version 0.0.4). */
export const prometheusText = (pairs: ReadonlyArray<MetricPair.MetricPair.Untyped>): string => {
  const families = new Map<string, { type: string; help: string; lines: Array<string> }>()
  for (const { metricKey, metricState } of pairs) {
    const name = metricKey.name.replace(/[^a-zA-Z0-9_:]/g, "_")
    const tags = metricKey.tags.map((tag) => ({ key: tag.key, value: tag.value }))
    const state = metricState as unknown as Record<string, unknown>
    const family = (type: string) => {
      const existing = families.get(name)
      if (existing !== undefined) return existing.lines
      const created = { type, help: Option.getOrElse(metricKey.description, () => name), lines: [] as Array<string> }
      families.set(name, created)
      return created.lines
    }
    if ("buckets" in state) {
      const lines = family("histogram")
      for (const [boundary, count] of state.buckets as ReadonlyArray<readonly [number, number]>) {
        lines.push(`${name}_bucket${labels(tags, `le="${number(boundary)}"`)} ${count}`)
      }
      lines.push(`${name}_bucket${labels(tags, 'le="+Inf"')} ${state.count}`)
      lines.push(`${name}_sum${labels(tags)} ${number(state.sum as number)}`)
      lines.push(`${name}_count${labels(tags)} ${state.count}`)
    } else if ("count" in state && !("sum" in state)) {
      family("counter").push(`${name}${labels(tags)} ${number(state.count as number | bigint)}`)
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

/** `GET /metrics`: every metric of this process, as Prometheus scrapes them (the pool sampled now). */
export const metricsResponse = (pool: DatabasePool["Type"]) =>
  Effect.gen(function* () {
    for (const [state, value] of Object.entries(yield* pool.usage)) {
      yield* Metric.set(Metric.tagged(dbPoolConnections, "state", state), value)
    }
    const pairs = yield* Metric.snapshot
    return HttpServerResponse.text(prometheusText(pairs), { contentType: "text/plain; version=0.0.4; charset=utf-8" })
  })
