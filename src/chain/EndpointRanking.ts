/**
 * The order in which a read tries the chain's JSON-RPC endpoints (pure). Endpoints in use come
 * first, best first by the score viem's `fallback` transport ranks with: 0.7 × stability (the share
 * of recent probes answered) + 0.3 × latency score (1 - its mean latency / the slowest mean), ties
 * in configured order; those degraded (in a backoff after a rate limit or a server error) after
 * the others in use, ranked alike. Endpoints seen down follow in configured order, tried only with
 * the time left. Endpoints never checked, or on another chain, are never used.
 */

export type EndpointStatus = "up" | "down" | "unchecked" | "wrong-chain"

/** One probe of an endpoint: answered or not, and how long it took. */
export interface Probe {
  readonly answered: boolean
  readonly ms: number
}

export interface EndpointHealth {
  readonly status: EndpointStatus
  /** The latest probes, oldest first. */
  readonly probes: ReadonlyArray<Probe>
  /** In a backoff after its own fault (a rate limit, a server error): tried after those in use. */
  readonly degraded: boolean
}

const STABILITY_WEIGHT = 0.7
const LATENCY_WEIGHT = 0.3

/** Mean latency of the answered probes; undefined before any answered. */
export const meanLatency = (probes: ReadonlyArray<Probe>): number | undefined => {
  const answered = probes.filter((probe) => probe.answered)
  return answered.length === 0 ? undefined : answered.reduce((sum, probe) => sum + probe.ms, 0) / answered.length
}

const stability = (probes: ReadonlyArray<Probe>) =>
  probes.length === 0 ? 1 : probes.filter((probe) => probe.answered).length / probes.length

/** Indices of the usable endpoints, in the order a read tries them. */
export const rankEndpoints = (endpoints: ReadonlyArray<EndpointHealth>): ReadonlyArray<number> => {
  const latencies = endpoints.map((endpoint) => meanLatency(endpoint.probes))
  const slowest = Math.max(0, ...latencies.map((latency) => latency ?? 0))
  const score = (i: number) => {
    const latency = latencies[i]
    const latencyScore = latency === undefined || slowest === 0 ? 1 : 1 - latency / slowest
    return STABILITY_WEIGHT * stability(endpoints[i]!.probes) + LATENCY_WEIGHT * latencyScore
  }
  const indices = endpoints.map((_, i) => i)
  const up = indices.filter((i) => endpoints[i]!.status === "up")
  const scores = new Map(up.map((i) => [i, score(i)]))
  const best = (a: number, b: number) => scores.get(b)! - scores.get(a)! || a - b
  const healthy = up.filter((i) => !endpoints[i]!.degraded).sort(best)
  const degraded = up.filter((i) => endpoints[i]!.degraded).sort(best)
  return [...healthy, ...degraded, ...indices.filter((i) => endpoints[i]!.status === "down")]
}
