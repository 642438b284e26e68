import { randomBytes } from "node:crypto"
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { createServer } from "node:http"
import { tmpdir } from "node:os"
import path from "node:path"
import { expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { callService, startService, stopService } from "../support/process.js"
import { signPayment } from "../support/x402.js"

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
  "with OTEL_EXPORTER_OTLP_ENDPOINT, request spans are exported; tokens, payments and signatures appear nowhere",
  () =>
    Effect.gen(function* () {
      const collector = yield* fakeCollector
      const dataDir = mkdtempSync(path.join(tmpdir(), "card-service-otel-"))
      chmodSync(dataDir, 0o755)
      yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
      const service = yield* startService({
        PORT: String(yield* freePort),
        DATA_DIR: dataDir,
        MERCHANT_PAY_TO: privateKeyToAccount(generatePrivateKey()).address,
        OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${collector.port}`
      })
      const call = (method: string, route: string, json?: unknown, headers: Record<string, string> = {}) =>
        callService(service, method, route, { ...(json === undefined ? {} : { json }), headers })
      const account = privateKeyToAccount(generatePrivateKey())
      const { body: challenge } = yield* call("POST", "/auth/challenge", { address: account.address })
      const signature = yield* Effect.promise(() => account.signMessage({ message: challenge.message }))
      const { body: signedIn } = yield* call("POST", "/auth/verify", { message: challenge.message, signature })
      const token: string = signedIn.token
      expect(token).toBeDefined()
      const cookie = `session=${randomBytes(16).toString("hex")}`
      const me = yield* call("GET", "/me", undefined, { authorization: `Bearer ${token}`, cookie })
      expect(me.status).toBe(200)

      // A paid order: the devnet funds dev account 1 with USD1.
      const { body: order } = yield* call("POST", "/merchant/orders", { amount: "1.25", description: "traced" })
      const { body: offer } = yield* call("GET", `/merchant/orders/${order.id}/pay`)
      const payment = yield* Effect.promise(() => signPayment(privateKeyToAccount(ANVIL_ACCOUNT_KEYS[1]!), offer))
      const paid = yield* call("POST", `/merchant/orders/${order.id}/pay`, undefined, {
        "payment-signature": payment.header
      })
      expect(paid.status).toBe(200)
      const receipt = paid.headers?.get("payment-response") ?? ""
      expect(receipt).toBeTruthy()

      // Webhook MACs, right or wrong, are credentials too.
      const sandboxMac = `v1=${randomBytes(32).toString("hex")}`
      const diditMac = randomBytes(32).toString("hex")
      const webhook = yield* call(
        "POST",
        "/kyc/webhook/sandbox",
        { id: "x" },
        {
          "x-sandbox-signature": sandboxMac,
          "x-sandbox-timestamp": String(Math.floor(Date.now() / 1000)),
          "x-signature": diditMac
        }
      )
      expect(webhook.status).toBe(401)
      expect(yield* stopService(service, "SIGTERM")).toBe(0) // flushes the exporter

      const traces = collector.received.filter((r) => r.path === "/v1/traces").map((r) => r.body)
      expect(traces.length).toBeGreaterThan(0)
      const exported = traces.join("\n")
      expect(exported).toContain("http.server POST")
      expect(exported).toContain("http.server GET")
      expect(exported).toContain("Auth.verify")
      expect(exported).toContain("Merchant.pay")
      expect(exported).toContain(account.address)
      // The headers were seen, and recorded as redacted.
      for (const name of ["authorization", "cookie", "payment-signature", "x-sandbox-signature", "x-signature"]) {
        expect(exported).toContain(`"http.request.header.${name}"`)
      }
      expect(exported).toContain('"http.response.header.payment-response"')
      const everything = collector.received.map((r) => r.body).join("\n") + service.output()
      for (const secret of [
        token,
        signature.slice(2),
        cookie,
        payment.header,
        payment.payload.payload.signature.slice(2),
        receipt,
        sandboxMac,
        diditMac
      ]) {
        expect(everything).not.toContain(secret)
      }
    }).pipe(Effect.scoped),
  300_000
)
