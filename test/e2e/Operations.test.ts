/**
 * What an operator and a newcomer's browser see beside the API: the landing page the identity
 * check returns to, and the Prometheus metrics after a paid order (on the in-memory chain: this is
 * about our counting, not the chain).
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { newAccount } from "../support/auth.js"
import { send } from "../support/http.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import { testServer } from "../support/TestServer.js"
import { signPayment } from "../support/x402.js"

const merchant = newAccount()

/** The value of one series in Prometheus text, e.g. `merchant_settlements_total{outcome="settled"}`. */
const sample = (text: string, series: string) => {
  const line = text.split("\n").find((candidate) => candidate.startsWith(`${series} `))
  return line === undefined ? undefined : Number(line.slice(series.length + 1))
}

/**
 * A scrape of /metrics now, and a way to read how much a counter grew since. Effect's metrics belong
 * to the process, which other test files' services share (vitest runs a worker's files in one
 * module graph): counts are compared with a scrape taken before, never with zero.
 */
const counterSince = Effect.gen(function* () {
  const before = (yield* send("GET", "/metrics")).body as string
  return (after: string, series: string) => (sample(after, series) ?? 0) - (sample(before, series) ?? 0)
})

layer(testServer({ MERCHANT_PAY_TO: merchant.address }, { chain: InMemoryChain.layer() }), {
  excludeTestServices: true
})("the operator's view", (it) => {
  it.effect("GET / is a small HTML page linking the docs, the OpenAPI document and /health", () =>
    Effect.gen(function* () {
      const response = yield* send("GET", "/")
      expect(response.status).toBe(200)
      expect(response.headers["content-type"]).toBe("text/html; charset=utf-8")
      expect(response.headers["x-request-id"]).toMatch(/^[0-9a-f-]{36}$/)
      for (const link of ["/docs", "/openapi.json", "/health"]) expect(response.body).toContain(`href="${link}"`)
      expect(response.body).toContain("return to the app")
    })
  )

  it.effect("after a paid order /metrics has its requests by route template, the settlement and the pool", () =>
    Effect.gen(function* () {
      const chain = yield* InMemoryChain
      const grown = yield* counterSince
      const payer = newAccount()
      yield* chain.mint(chain.usd1.address, payer.address, parseUnits("5", 18))
      const order = yield* send("POST", "/merchant/orders", { json: { amount: "1.25", description: "Tea" } })
      expect(order.status).toBe(200)
      const required = yield* send("GET", `/merchant/orders/${order.body.id}/pay`)
      expect(required.status).toBe(402)
      const { header } = yield* Effect.promise(() => signPayment(payer, required.body))
      const paid = yield* send("POST", `/merchant/orders/${order.body.id}/pay`, {
        headers: { "PAYMENT-SIGNATURE": header }
      })
      expect(paid.status).toBe(200)

      const scraped = yield* send("GET", "/metrics")
      expect(scraped.status).toBe(200)
      expect(scraped.headers["content-type"]).toBe("text/plain; version=0.0.4; charset=utf-8")
      const text = scraped.body as string
      expect(text).toContain("# TYPE http_requests_total counter")
      expect(grown(text, 'http_requests_total{method="POST",route="/merchant/orders",status="200"}')).toBe(1)
      // The order's id is not a label: every order shares its route template.
      expect(grown(text, 'http_requests_total{method="GET",route="/merchant/orders/:id/pay",status="402"}')).toBe(1)
      expect(grown(text, 'http_requests_total{method="POST",route="/merchant/orders/:id/pay",status="200"}')).toBe(1)
      expect(text).not.toContain(order.body.id)
      expect(grown(text, 'http_request_duration_seconds_count{method="POST",route="/merchant/orders/:id/pay"}')).toBe(1)
      expect(grown(text, 'merchant_settlements_total{outcome="settled"}')).toBe(1)
      expect(sample(text, 'db_pool_connections{state="total"}')).toBeGreaterThan(0)
      expect(sample(text, 'db_pool_connections{state="waiting"}')).toBe(0)
    })
  )

  it.effect.skipIf(withoutPromtool)(
    "/metrics passes promtool check metrics, with the process metrics beside ours",
    () =>
      Effect.gen(function* () {
        yield* send("GET", "/health")
        const text = (yield* send("GET", "/metrics")).body as string
        expect(promtoolProblems(text)).toBe("")
        for (const series of [
          "process_cpu_seconds_total",
          "process_resident_memory_bytes",
          "process_start_time_seconds",
          "process_open_fds",
          "nodejs_heap_size_used_bytes",
          "nodejs_eventloop_lag_p99_seconds"
        ]) {
          expect(sample(text, series), series).toBeGreaterThanOrEqual(0)
        }
        // Effect's own fiber counters, in Prometheus' terms: counted up, or a gauge when it goes down.
        expect(text).toContain("# TYPE effect_fiber_started_total counter")
        expect(text).toContain("# TYPE effect_fiber_active gauge")
      })
  )

  it.effect("a path outside the API is counted under one label, whatever it is", () =>
    Effect.gen(function* () {
      const grown = yield* counterSince
      yield* send("GET", "/no/such/path")
      yield* send("GET", "/another-unknown")
      const text = (yield* send("GET", "/metrics")).body as string
      expect(grown(text, 'http_requests_total{method="GET",route="unmatched",status="404"}')).toBe(2)
      expect(text).not.toContain("another-unknown")
    })
  )
})
