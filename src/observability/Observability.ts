/**
 * Logs (JSON lines by default, `LOG_FORMAT=pretty` for humans) and, when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OTLP/HTTP export of traces, logs and metrics.
 * Nothing secret is ever put in a log annotation or span attribute by this service.
 *
 * Without an endpoint no span would go anywhere, so tracing is off: no span is made per request,
 * service call or SQL statement. The exporter's modules are loaded only when an endpoint is set.
 */
import { FetchHttpClient, Headers } from "@effect/platform"
import { Effect, Layer, Logger, Option } from "effect"
import { AppConfig } from "../runtime/Config.js"
import { SERVICE_NAME, SERVICE_VERSION } from "../runtime/ServiceInfo.js"
import { JsonLogLive } from "./LogSink.js"

/**
 * Headers that carry a credential or a spendable payment: a bearer token, cookies, an API key, a
 * signed EIP-3009 authorization (usable by whoever reads it until its `validBefore`), its receipt,
 * and webhook MACs. The platform writes `<redacted>` for them wherever it records headers: the
 * `http.request.header.*` / `http.response.header.*` attributes of the spans of requests served
 * and sent, and any logged headers. Its own default list is only the first four.
 */
export const REDACTED_HEADERS: ReadonlyArray<string> = [
  "authorization",
  "cookie",
  "set-cookie",
  "x-api-key",
  "payment-signature",
  "payment-response",
  "x-payment",
  "x-payment-response",
  "x-signature",
  "x-sandbox-signature"
]

/** `REDACTED_HEADERS` in force for everything built under it. */
export const RedactedHeadersLive = Layer.locallyScoped(Headers.currentRedactedNames, REDACTED_HEADERS)

export const ObservabilityLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const logging = Layer.merge(
      config.logFormat === "json" ? JsonLogLive : Logger.pretty,
      Logger.minimumLogLevel(config.logLevel)
    )
    if (Option.isNone(config.otlpEndpoint)) {
      return Layer.mergeAll(logging, RedactedHeadersLive, Layer.setTracerEnabled(false))
    }
    const Otlp = yield* Effect.promise(() => import("@effect/opentelemetry/Otlp"))
    const exporter = Otlp.layerJson({
      baseUrl: config.otlpEndpoint.value,
      resource: { serviceName: SERVICE_NAME, serviceVersion: SERVICE_VERSION }
    }).pipe(Layer.provide(FetchHttpClient.layer))
    return Layer.mergeAll(logging, RedactedHeadersLive, exporter)
  })
)
