/**
 * The web app as the service serves it, over HTTP: the page for /app and every screen's path (a
 * reload lands on the same screen) with its strict policy and the service's configuration, the
 * built files (gzipped, cached for good by the browser when their name carries a hash), and the embedded devnet's
 * faucet, which exists only with the embedded devnet.
 */
import { gunzipSync } from "node:zlib"
import { HttpClient, HttpClientRequest } from "@effect/platform"
import { expect, layer } from "@effect/vitest"
import { Effect, Layer } from "effect"
import { formatUnits } from "viem"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { ChainDeployment, DeployedTokens } from "../../src/chain/Deployment.js"
import { EvmChain } from "../../src/chain/EvmChain.js"
import { FAUCET_GRANT_USD1 } from "../../src/devnet/Faucet.js"
import { APP_PAGE_CSP } from "../../src/http/PageSecurity.js"
import { signIn } from "../support/auth.js"
import { bearer, send } from "../support/http.js"
import { TestDevnetDeployment } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"

const PAY_TO = "0x000000000000000000000000000000000000dEaD"

/** The page's configuration block. */
const configOf = (html: string) => {
  const match = /<script type="application\/json" id="app-config">(.*?)<\/script>/s.exec(html)
  expect(match).not.toBeNull()
  return JSON.parse(match![1]!) as Record<string, unknown>
}

/** A raw GET, keeping the bytes (a gzipped body is not decoded by the test client). */
const getBytes = (path: string, headers: Record<string, string> = {}) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    const response = yield* client.execute(HttpClientRequest.get(path).pipe(HttpClientRequest.setHeaders(headers)))
    return { status: response.status, headers: response.headers, bytes: new Uint8Array(yield* response.arrayBuffer) }
  }).pipe(Effect.scoped, Effect.orDie)

layer(testServer({ MERCHANT_PAY_TO: PAY_TO, AGENT_MODE: "dry", RATE_LIMIT_FAUCET: "2" }), {
  excludeTestServices: true,
  timeout: "120 seconds"
})("the web app on the embedded devnet", (it) => {
  it.effect("/app and every screen's path answer the page, with a strict policy and the service's configuration", () =>
    Effect.gen(function* () {
      const chain = yield* ChainClient
      for (const path of ["/app", "/app/", "/app/sign-in", "/app/statement", "/app/agent?x=1", "/app/no/such/screen"]) {
        const response = yield* send("GET", path)
        expect(response.status, path).toBe(200)
        expect(response.headers["content-type"]).toBe("text/html; charset=utf-8")
        expect(response.headers["content-security-policy"]).toBe(APP_PAGE_CSP)
        expect(response.headers["x-content-type-options"]).toBe("nosniff")
        expect(response.headers["cache-control"]).toBe("no-cache")
        expect(configOf(response.body)).toEqual({
          devnet: true,
          merchant: true,
          agent: "dry",
          chainId: chain.chainId,
          cardSandbox: true
        })
        // No inline script runs: the only scripts are the bundle (src) and the JSON data block.
        const scripts = [...(response.body as string).matchAll(/<script\b([^>]*)>/g)].map((m) => m[1]!.trim())
        expect(scripts).toEqual([
          expect.stringMatching(/^type="module" src="\/app\/assets\/main-[A-Z0-9]{8}\.js"$/),
          'type="application/json" id="app-config"'
        ])
      }
      const policy = APP_PAGE_CSP.split("; ")
      expect(policy).toEqual(
        expect.arrayContaining(["default-src 'none'", "script-src 'self'", "frame-ancestors 'none'"])
      )
      expect(APP_PAGE_CSP).not.toMatch(/unsafe-inline|unsafe-eval|\*/)
    })
  )

  it.effect("the built files: gzipped when accepted, cached for good when hashed; a missing one is a coded 404", () =>
    Effect.gen(function* () {
      const page = (yield* send("GET", "/app")).body as string
      const script = /src="(\/app\/assets\/main-[A-Z0-9]{8}\.js)"/.exec(page)![1]!
      const style = /href="(\/app\/assets\/main-[A-Z0-9]{8}\.css)"/.exec(page)![1]!
      const plain = yield* getBytes(script)
      expect(plain.status).toBe(200)
      expect(plain.headers["content-type"]).toBe("text/javascript; charset=utf-8")
      expect(plain.headers["cache-control"]).toBe("private, max-age=31536000, immutable")
      expect(plain.headers["x-content-type-options"]).toBe("nosniff")
      expect(plain.headers["content-encoding"]).toBeUndefined()
      const zipped = yield* getBytes(script, { "accept-encoding": "gzip, deflate" })
      expect(zipped.headers["content-encoding"]).toBe("gzip")
      expect(Buffer.from(gunzipSync(zipped.bytes)).equals(Buffer.from(plain.bytes))).toBe(true)
      expect(zipped.bytes.length).toBeLessThan(plain.bytes.length)
      expect((yield* getBytes(style)).headers["content-type"]).toBe("text/css; charset=utf-8")
      expect((yield* getBytes("/app/assets/icon.svg")).headers["content-type"]).toBe("image/svg+xml")
      const missing = yield* send("GET", "/app/assets/nothing-AAAAAAAA.js")
      expect(missing.status).toBe(404)
      expect(missing.body).toEqual({ error: expect.stringContaining("nothing-AAAAAAAA.js"), code: "NOT_FOUND" })
    })
  )

  it.effect("the landing page links to the app", () =>
    Effect.gen(function* () {
      expect((yield* send("GET", "/")).body).toContain('href="/app"')
    })
  )

  it.effect("the devnet faucet gives the signed-in address 100 USD1, is rate limited, and needs a token", () =>
    Effect.gen(function* () {
      const chain = yield* ChainClient
      const { account, token } = yield* signIn()
      const refused = yield* send("POST", "/devnet/faucet")
      expect(refused.status).toBe(401)
      expect(refused.body.code).toBe("UNAUTHORIZED")

      const granted = yield* send("POST", "/devnet/faucet", { headers: bearer(token) })
      expect(granted.status).toBe(200)
      expect(granted.body).toEqual({
        address: account.address,
        grantedUsd1: FAUCET_GRANT_USD1,
        usd1: FAUCET_GRANT_USD1
      })
      const onChain = yield* chain.balanceOf(chain.usd1.address, account.address)
      expect(Number(formatUnits(onChain, chain.usd1.decimals))).toBe(FAUCET_GRANT_USD1)

      // RATE_LIMIT_FAUCET=2 a minute per client: the third call is refused, nothing granted.
      expect((yield* send("POST", "/devnet/faucet", { headers: bearer(token) })).body.usd1).toBe(2 * FAUCET_GRANT_USD1)
      const limited = yield* send("POST", "/devnet/faucet", { headers: bearer(token) })
      expect(limited.status).toBe(429)
      expect(limited.body.code).toBe("RATE_LIMITED")
      expect(Number(limited.headers["retry-after"])).toBeGreaterThan(0)
      const after = yield* chain.balanceOf(chain.usd1.address, account.address)
      expect(Number(formatUnits(after, chain.usd1.decimals))).toBe(2 * FAUCET_GRANT_USD1)

      const document = (yield* send("GET", "/openapi.json")).body
      expect(Object.keys(document.paths["/devnet/faucet"])).toEqual(["post"])
      expect(Object.keys(document.paths["/devnet/faucet"].post.responses).sort()).toEqual(
        expect.arrayContaining(["200", "401", "429", "503"])
      )
    })
  )
})

/** The same devnet reached as any chain (as with CHAIN_RPC_URL): no faucet. */
const RemoteChain = Layer.merge(EvmChain, DeployedTokens).pipe(
  Layer.provide(
    Layer.effect(
      ChainDeployment,
      Effect.map(ChainDeployment, (deployment) => ChainDeployment.of({ ...deployment, local: false }))
    )
  ),
  Layer.provide(TestDevnetDeployment)
)

layer(testServer({}, { chain: RemoteChain }), { excludeTestServices: true, timeout: "120 seconds" })(
  "the web app on a chain that is not the embedded devnet",
  (it) => {
    it.effect("no development key, no faucet: /devnet/* is not served and not in the OpenAPI document", () =>
      Effect.gen(function* () {
        expect(configOf((yield* send("GET", "/app/sign-in")).body)).toMatchObject({
          devnet: false,
          merchant: false,
          agent: "off"
        })
        const { token } = yield* signIn()
        const response = yield* send("POST", "/devnet/faucet", { headers: bearer(token) })
        expect(response.status).toBe(404)
        expect(response.body.code).toBe("NOT_FOUND")
        expect((yield* send("GET", "/openapi.json")).body.paths["/devnet/faucet"]).toBeUndefined()
      })
    )
  }
)
