import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import path from "node:path"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { freePort } from "../../src/EmbeddedPostgres.js"
import { startService, stopService } from "../support/process.js"

/** A loopback OTLP/HTTP collector that keeps every body it receives, by path. */
const fakeCollector = Effect.acquireRelease(
  Effect.async<{ port: number; received: Array<{ path: string; body: string }>; close: () => void }>((resume) => {
    const received: Array<{ path: string; body: string }> = []
    const server = createServer((request, response) => {
      let body = ""
      request.on("data", (chunk) => {
        body += chunk
      })
      request.on("end", () => {
        received.push({ path: request.url ?? "", body })
        response.setHeader("content-type", "application/json")
        response.end("{}")
      })
    })
    server.listen(0, "127.0.0.1", () => {
      const address = server.address()
      const port = typeof address === "object" && address !== null ? address.port : 0
      resume(Effect.succeed({ port, received, close: () => server.close() }))
    })
  }),
  (collector) => Effect.sync(() => collector.close())
)

it.live(
  "with OTEL_EXPORTER_OTLP_ENDPOINT, request spans are exported; tokens and signatures appear nowhere",
  () =>
    Effect.gen(function* () {
      const collector = yield* fakeCollector
      const dataDir = mkdtempSync(path.join(tmpdir(), "card-service-otel-"))
      chmodSync(dataDir, 0o755)
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
      const service = yield* startService({
        PORT: String(yield* freePort),
        DATA_DIR: dataDir,
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`
      })
      const post = (route: string, body: unknown, headers: Record<string, string> = {}) =>
        Effect.promise(() =>
          fetch(`${service.baseUrl}${route}`, {
            method: "POST",
            headers: { "content-type": "application/json", ...headers },
            body: JSON.stringify(body)
          }).then((r) => r.json() as Promise<Record<string, string>>)
        )
      const account = privateKeyToAccount(generatePrivateKey())
      const { message } = yield* post("/auth/challenge", { address: account.address })
      const signature = yield* Effect.promise(() => account.signMessage({ message: message! }))
      const { token } = yield* post("/auth/verify", { message, signature })
      expect(token).toBeDefined()
      const me = yield* Effect.promise(() =>
        fetch(`${service.baseUrl}/me`, { headers: { authorization: `Bearer ${token}` } })
      )
      expect(me.status).toBe(200)
      expect(yield* stopService(service, "SIGTERM")).toBe(0) // flushes the exporter

      const traces = collector.received.filter((r) => r.path === "/v1/traces").map((r) => r.body)
      expect(traces.length).toBeGreaterThan(0)
      const exported = traces.join("\n")
      expect(exported).toContain("http.server POST")
      expect(exported).toContain("http.server GET")
      expect(exported).toContain("Auth.verify")
      expect(exported).toContain(account.address)
      const everything = collector.received.map((r) => r.body).join("\n") + service.output()
      expect(everything).not.toContain(token!)
      expect(everything).not.toContain(signature.slice(2))
    }).pipe(Effect.scoped),
  300_000
)
