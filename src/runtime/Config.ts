/**
 * Service-wide configuration, read once from the environment with effect `Config`.
 * A bad value fails start-up with a ConfigError that names the variable and the expected form.
 * Domain-specific settings (chain, identity provider, ...) live beside their domain.
 */
import { Config, ConfigError, Context, Duration, Either, Layer, LogLevel, Option, type Redacted } from "effect"
import { getAddress, isAddress } from "viem"
import { parseHttpUrl } from "./HttpUrl.js"

/** An origin is `scheme://host[:port]` with nothing after it. */
const parseOrigin = (text: string): string | undefined => {
  const url = parseHttpUrl(text)
  return url !== undefined && url.origin === text.replace(/\/$/, "") ? url.origin : undefined
}

/** An http(s) URL without trailing slashes. */
export const httpUrl = (name: string) =>
  Config.string(name).pipe(
    Config.mapOrFail((text) => {
      const url = parseHttpUrl(text)
      return url !== undefined
        ? Either.right(url.toString().replace(/\/+$/, ""))
        : Either.left(ConfigError.InvalidData([name], `Expected ${name} to be an http(s) URL, got "${text}"`))
    })
  )

const origins = (name: string) =>
  Config.string(name).pipe(
    Config.mapOrFail((text) => {
      const parts = text
        .split(",")
        .map((part) => part.trim())
        .filter((part) => part.length > 0)
      const parsed = parts.map(parseOrigin)
      const bad = parts.filter((_, i) => parsed[i] === undefined)
      return bad.length > 0 || parts.length === 0
        ? Either.left(
            ConfigError.InvalidData(
              [name],
              `Expected ${name} to be comma-separated origins like https://app.example.com, got "${text}"`
            )
          )
        : Either.right(parsed as ReadonlyArray<string>)
    })
  )

const SHORT_DURATION = /^(\d+(?:\.\d+)?)\s*(ms|s|m|h)$/
const SHORT_UNIT_MS = { ms: 1, s: 1000, m: 60_000, h: 3_600_000 } as const

/**
 * A positive duration setting, one grammar for all of them: milliseconds (`5000`),
 * `500ms`/`5s`/`1m`/`1h`, or effect's form (`5 seconds`, `300 millis`).
 */
export const durationConfig = (name: string, fallback: Duration.DurationInput) =>
  Config.string(name).pipe(
    Config.mapOrFail((text) => {
      const trimmed = text.trim()
      const short = SHORT_DURATION.exec(trimmed)
      const parsed = /^\d+$/.test(trimmed)
        ? Option.some(Duration.millis(Number(trimmed)))
        : short !== null
          ? Option.some(Duration.millis(Number(short[1]) * SHORT_UNIT_MS[short[2] as keyof typeof SHORT_UNIT_MS]))
          : Duration.decodeUnknown(trimmed)
      return Option.isSome(parsed) && Duration.toMillis(parsed.value) > 0 && Duration.isFinite(parsed.value)
        ? Either.right(parsed.value)
        : Either.left(
            ConfigError.InvalidData(
              [name],
              `Expected ${name} to be a positive duration such as 5000 (ms), 5s or "5 seconds", got "${text}"`
            )
          )
    }),
    Config.withDefault(Duration.decode(fallback))
  )

/** A positive integer setting. */
export const positiveInteger = (name: string, fallback: number) =>
  Config.integer(name).pipe(
    Config.validate({ message: `Expected ${name} to be a positive integer`, validation: (n) => n > 0 }),
    Config.withDefault(fallback)
  )

/** An EVM address in any case, normalised to its EIP-55 checksum form. */
export const addressConfig = (name: string) =>
  Config.string(name).pipe(
    Config.mapOrFail((text) =>
      isAddress(text, { strict: false })
        ? Either.right(getAddress(text))
        : Either.left(ConfigError.InvalidData([name], `Expected ${name} to be a 0x-prefixed 20-byte hex address`))
    )
  )

export type AgentMode = "off" | "dry" | "live"

export interface AppSettings {
  readonly port: number
  /** The interface to listen on: loopback unless a container or a load balancer needs `0.0.0.0`. */
  readonly host: string
  readonly appUrl: string
  /** This service's public base URL (sandbox identity pages, x402 resource URLs). */
  readonly apiUrl: string
  readonly webOrigins: ReadonlyArray<string>
  readonly databaseUrl: Option.Option<Redacted.Redacted<string>>
  readonly dataDir: string
  readonly agentMode: AgentMode
  readonly merchantPayTo: Option.Option<`0x${string}`>
  readonly logFormat: "json" | "pretty"
  readonly logLevel: LogLevel.LogLevel
  readonly otlpEndpoint: Option.Option<string>
  /** The longest a request waits on one chain read (or a chain step of a payment) before 503 CHAIN_UNAVAILABLE. */
  readonly chainTimeout: Duration.Duration
}

const appSettings: Config.Config<AppSettings> = Config.all({
  port: Config.port("PORT").pipe(Config.withDefault(3000)),
  host: Config.string("HOST").pipe(
    Config.validate({
      message: "Expected HOST to be an IP address or a host name, such as 127.0.0.1 or 0.0.0.0",
      validation: (host) => /^[A-Za-z0-9.:-]+$/.test(host)
    }),
    Config.withDefault("127.0.0.1")
  ),
  appUrl: Config.option(httpUrl("APP_URL")),
  apiUrl: Config.option(httpUrl("API_URL")),
  webOrigins: origins("WEB_ORIGIN").pipe(Config.withDefault([] as ReadonlyArray<string>)),
  databaseUrl: Config.option(Config.redacted("DATABASE_URL")),
  dataDir: Config.string("DATA_DIR").pipe(Config.withDefault(".data")),
  agentMode: Config.literal("off", "dry", "live")("AGENT_MODE").pipe(Config.withDefault("off" as const)),
  merchantPayTo: Config.option(addressConfig("MERCHANT_PAY_TO")),
  logFormat: Config.literal("json", "pretty")("LOG_FORMAT").pipe(Config.withDefault("json" as const)),
  logLevel: Config.logLevel("LOG_LEVEL").pipe(Config.withDefault(LogLevel.Info)),
  otlpEndpoint: Config.option(httpUrl("OTEL_EXPORTER_OTLP_ENDPOINT")),
  chainTimeout: durationConfig("CHAIN_TIMEOUT", "4 seconds")
}).pipe(
  // Without APP_URL the app is this service on this machine, on whatever PORT it listens; without
  // API_URL the service is served under APP_URL; without WEB_ORIGIN the app's own origin is the only
  // trusted one.
  Config.map(({ apiUrl, appUrl: givenAppUrl, ...settings }) => {
    const appUrl = Option.getOrElse(givenAppUrl, () => `http://localhost:${settings.port}`)
    return {
      ...settings,
      appUrl,
      apiUrl: Option.getOrElse(apiUrl, () => appUrl),
      webOrigins: settings.webOrigins.length > 0 ? settings.webOrigins : [new URL(appUrl).origin]
    }
  })
)

export class AppConfig extends Context.Tag("app/AppConfig")<AppConfig, AppSettings>() {
  static readonly layer = Layer.effect(AppConfig, appSettings)
}
