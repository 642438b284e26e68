/**
 * The card holder's web app at `/app`: the built page (WebBuild.ts) for `/app` and every path under
 * it but `/app/assets/` (the app routes in the browser, so a reload or a shared link lands on the
 * same screen), and the built files under `/app/assets/`, gzipped when the browser accepts it.
 *
 * The page learns from a JSON data block (not a script) which parts are on: the merchant, the
 * agent, the sandbox card network (its terminal), and whether the service runs its embedded devnet
 * (then, and only then, the app offers a development key). Its policy (`APP_PAGE_CSP`) runs only
 * the app's own files, loads and connects to nothing but this origin, and forbids framing;
 * `nosniff` comes with every response of the service.
 */
import { readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import { HttpApiBuilder, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Effect, Option } from "effect"
import { networkName } from "../authorizations/AuthorizationSettings.js"
import { ChainClient } from "../chain/ChainClient.js"
import { APP_PAGE_CSP } from "../http/PageSecurity.js"
import { AppConfig } from "../runtime/Config.js"
import { ASSETS_PATH, CONFIG_MARKER, ensureWebBuild } from "./WebBuild.js"

const CONTENT_TYPES: Readonly<Record<string, string>> = {
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".svg": "image/svg+xml",
  ".map": "application/json",
  ".txt": "text/plain; charset=utf-8"
}

/**
 * Names with esbuild's content hash never change: cached for a year, by the browser only (`private`):
 * the CORS layer answers `Vary: Origin` alone, so a shared cache could not tell a gzipped copy apart.
 */
const HASHED = /-[A-Z0-9]{8}\.(js|css|map)$/

interface Asset {
  readonly bytes: Uint8Array
  readonly gzipped: Uint8Array | undefined
  readonly contentType: string
  readonly cacheControl: string
}

/** Every built file under assets/, read once. */
const readAssets = (dir: string): ReadonlyMap<string, Asset> => {
  const assets = new Map<string, Asset>()
  const folder = path.join(dir, "assets")
  for (const name of readdirSync(folder)) {
    const contentType = CONTENT_TYPES[path.extname(name)]
    if (contentType === undefined) continue
    const gz = path.join(folder, `${name}.gz`)
    let gzipped: Uint8Array | undefined
    try {
      gzipped = readFileSync(gz)
    } catch {
      gzipped = undefined
    }
    assets.set(name, {
      bytes: readFileSync(path.join(folder, name)),
      gzipped,
      contentType,
      cacheControl: HASHED.test(name) ? "private, max-age=31536000, immutable" : "no-cache"
    })
  }
  return assets
}

/** What the page is told about the service (web/config.ts reads it). */
export interface PageConfig {
  readonly devnet: boolean
  readonly merchant: boolean
  readonly agent: string
  readonly chainId: number
  /** The sandbox card network runs (CARD_NETWORK=sandbox): the terminal screen can swipe cards. */
  readonly cardSandbox: boolean
}

/** The page with its configuration in a JSON data block (`<` escaped, so the block cannot be closed early). */
export const pageWithConfig = (template: string, config: PageConfig) =>
  template.replace(
    CONFIG_MARKER,
    `<script type="application/json" id="app-config">${JSON.stringify(config).replace(/</g, "\\u003c")}</script>`
  )

const notFound = (pathname: string) =>
  HttpServerResponse.unsafeJson(
    { error: `no file ${pathname.slice(0, 200)} in the web app`, code: "NOT_FOUND" },
    { status: 404 }
  )

const unavailablePage = HttpServerResponse.text(
  '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Web app unavailable</title></head><body>' +
    "<h1>The web app is not available</h1><p>Its build failed when the service started: the service's log says why.</p>" +
    "</body></html>",
  {
    status: 503,
    contentType: "text/html; charset=utf-8",
    headers: { "content-security-policy": APP_PAGE_CSP, "retry-after": "30" }
  }
)

const assetResponse = (asset: Asset, acceptsGzip: boolean) =>
  HttpServerResponse.uint8Array(acceptsGzip && asset.gzipped !== undefined ? asset.gzipped : asset.bytes, {
    contentType: asset.contentType,
    headers: {
      "cache-control": asset.cacheControl,
      ...(acceptsGzip && asset.gzipped !== undefined ? { "content-encoding": "gzip" } : {})
    }
  })

export const WebAppLive = HttpApiBuilder.Router.use((router) =>
  Effect.gen(function* () {
    const config = yield* AppConfig
    const chain = yield* ChainClient
    const cardSandbox = (yield* networkName) === "sandbox"
    const build = yield* Effect.tryPromise(async () => {
      const { dir, built } = await ensureWebBuild()
      return { dir, built, assets: readAssets(dir), page: readFileSync(path.join(dir, "index.html"), "utf8") }
    }).pipe(
      Effect.tap((done) => (done.built ? Effect.logInfo(`web app built into ${done.dir}`) : Effect.void)),
      Effect.tapError((error) => Effect.logError("the web app could not be built: /app answers 503", error.cause)),
      Effect.option
    )
    const page = Option.map(build, ({ page }) =>
      HttpServerResponse.text(
        pageWithConfig(page, {
          devnet: Option.isSome(chain.faucet),
          merchant: Option.isSome(config.merchantPayTo),
          agent: config.agentMode,
          chainId: chain.chainId,
          cardSandbox
        }),
        {
          contentType: "text/html; charset=utf-8",
          headers: {
            "content-security-policy": APP_PAGE_CSP,
            "cache-control": "no-cache",
            "referrer-policy": "no-referrer"
          }
        }
      )
    )
    const serve = Effect.gen(function* () {
      if (Option.isNone(build) || Option.isNone(page)) return unavailablePage
      const request = yield* HttpServerRequest.HttpServerRequest
      const pathname = request.url.split("?")[0] ?? ""
      if (!pathname.startsWith(ASSETS_PATH)) return page.value
      const asset = build.value.assets.get(pathname.slice(ASSETS_PATH.length))
      if (asset === undefined) return notFound(pathname)
      return assetResponse(asset, /\bgzip\b/.test(request.headers["accept-encoding"] ?? ""))
    })
    yield* router.get("/app", serve)
    yield* router.get("/app/*", serve)
  })
)
