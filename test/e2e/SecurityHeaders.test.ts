/**
 * What a browser and a scraper are told (issue 25): `nosniff` on every response, errors, 404s and
 * the parser's own refusals included; a strict Content-Security-Policy that forbids framing on
 * every HTML page (/docs allows only its own inline scripts, by hash); `/metrics` behind
 * METRICS_TOKEN, or for this machine only while it is unset.
 */
import { HttpServer, HttpServerRequest } from "@effect/platform"
import { describe, expect, it, layer } from "@effect/vitest"
import { ConfigProvider, Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { metricsRoute } from "../../src/http/MetricsRoute.js"
import { inlineScriptHashes, scriptedPageCsp } from "../../src/http/PageSecurity.js"
import { send } from "../support/http.js"
import { rawRequest } from "../support/rawHttp.js"
import { testServer } from "../support/TestServer.js"

const METRICS_TOKEN = "scrape-me-0123456789abcdef"

const port = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress" ? server.address.port : 0
)

layer(testServer({ MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD" }, { chain: InMemoryChain.layer() }), {
  excludeTestServices: true
})("security headers", (it) => {
  it.effect("every answer says nosniff: success, typed error, 404, bad JSON, HTML, metrics", () =>
    Effect.gen(function* () {
      const answers = [
        yield* send("GET", "/health"),
        yield* send("GET", "/me"),
        yield* send("GET", "/no/such/route"),
        yield* send("POST", "/merchant/orders", { text: "{not json" }),
        yield* send("GET", "/merchant/orders/nope"),
        yield* send("GET", "/"),
        yield* send("GET", "/docs"),
        yield* send("GET", "/openapi.json"),
        yield* send("GET", "/metrics")
      ]
      expect(answers.map((answer) => answer.status)).toEqual([200, 401, 404, 400, 404, 200, 200, 200, 200])
      for (const answer of answers) expect(answer.headers["x-content-type-options"]).toBe("nosniff")
    })
  )

  it.effect("what is refused before routing, or by Node's parser, says nosniff too", () =>
    Effect.gen(function* () {
      const unsupported = yield* rawRequest(yield* port, [
        "POST /merchant/orders HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nhi"
      ])
      const unparsable = yield* rawRequest(yield* port, ["GET / HTTP/1.1\r\nHost: x\r\nBad Header\r\n\r\n"])
      expect([unsupported.status, unparsable.status]).toEqual([415, 400])
      for (const refused of [unsupported, unparsable]) {
        expect(refused.headers["x-content-type-options"]).toBe("nosniff")
      }
    })
  )

  it.effect("HTML pages are never framed and run no script but their own", () =>
    Effect.gen(function* () {
      const landing = yield* send("GET", "/")
      expect(landing.headers["content-security-policy"]).toBe(
        "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"
      )
      const docs = yield* send("GET", "/docs")
      const policy = docs.headers["content-security-policy"]!
      expect(policy).toBe(scriptedPageCsp(docs.body, ["https://app.example.com"]))
      // Scalar's two inline scripts (its configuration and its bundle), each by its hash.
      const hashes = inlineScriptHashes(docs.body)
      expect(hashes).toHaveLength(2)
      for (const hash of hashes) expect(policy).toContain(hash)
      expect(policy).not.toMatch(/script-src[^;]*'unsafe-(inline|eval)'/)
      expect(policy).toContain("frame-ancestors 'none'")
    })
  )
})

layer(testServer({ METRICS_TOKEN }, { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "/metrics with METRICS_TOKEN",
  (it) => {
    it.effect("needs the bearer token, even from this machine", () =>
      Effect.gen(function* () {
        for (const headers of [
          {},
          { authorization: "Bearer wrong-token-0123456789" },
          { authorization: METRICS_TOKEN }
        ]) {
          const refused = yield* send("GET", "/metrics", { headers })
          expect(refused.status).toBe(401)
          expect(refused.body.code).toBe("UNAUTHORIZED")
          expect(refused.headers["www-authenticate"]).toBe('Bearer realm="metrics"')
        }
        const scraped = yield* send("GET", "/metrics", { headers: { authorization: `Bearer ${METRICS_TOKEN}` } })
        expect(scraped.status).toBe(200)
        expect(scraped.body).toContain("# TYPE http_requests_total counter")
      })
    )
  }
)

describe("/metrics without METRICS_TOKEN", () => {
  const pool = { usage: Effect.succeed({ total: 1, idle: 1, waiting: 0 }) }
  /** The route's answer to a request whose connection comes from `peer`. */
  const answerTo = (peer: string, env: Record<string, string> = {}) =>
    Effect.gen(function* () {
      const handler = yield* metricsRoute(pool)
      const request = HttpServerRequest.fromWeb(new Request("http://service/metrics")).modify({
        remoteAddress: peer,
        // a proxy's header never makes a client local
        headers: HttpServerRequest.fromWeb(
          new Request("http://service/", { headers: { "x-forwarded-for": "127.0.0.1" } })
        ).headers
      })
      return yield* Effect.provideService(handler, HttpServerRequest.HttpServerRequest, request)
    }).pipe(Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))

  it.effect("is served to clients on this machine and a 404 to others", () =>
    Effect.gen(function* () {
      for (const peer of ["127.0.0.1", "::1", "::ffff:127.0.0.1"]) expect((yield* answerTo(peer)).status).toBe(200)
      for (const peer of ["10.1.2.3", "::ffff:10.1.2.3", "2001:db8::1", "128.0.0.1"]) {
        expect((yield* answerTo(peer)).status).toBe(404)
      }
    })
  )

  it.effect("a METRICS_TOKEN shorter than 16 characters stops the start", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(answerTo("127.0.0.1", { METRICS_TOKEN: "short" }))
      expect(String(error)).toContain("METRICS_TOKEN")
    })
  )
})
