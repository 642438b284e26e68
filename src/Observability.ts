/**
 * Logs (JSON lines by default, `LOG_FORMAT=pretty` for humans) and, when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OTLP/HTTP export of traces, logs and metrics.
 * Nothing secret is ever put in a log annotation or span attribute by this service.
 *
 * Without an endpoint no span would go anywhere, so tracing is off: no span is made per request,
 * service call or SQL statement. The exporter's modules are loaded only when an endpoint is set.
 */
import { FetchHttpClient } from "@effect/platform"
import { Effect, Layer, Logger, Option } from "effect"
import { AppConfig } from "./Config.js"
import { JsonLogLive } from "./LogSink.js"
import { SERVICE_NAME, SERVICE_VERSION } from "./ServiceInfo.js"

export const ObservabilityLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const logging = Layer.merge(
      config.logFormat === "json" ? JsonLogLive : Logger.pretty,
      Logger.minimumLogLevel(config.logLevel)
    )
    if (Option.isNone(config.otlpEndpoint)) return Layer.merge(logging, Layer.setTracerEnabled(false))
    const Otlp = yield* Effect.promise(() => import("@effect/opentelemetry/Otlp"))
    const exporter = Otlp.layerJson({
      baseUrl: config.otlpEndpoint.value,
      resource: { serviceName: SERVICE_NAME, serviceVersion: SERVICE_VERSION }
    }).pipe(Layer.provide(FetchHttpClient.layer))
    return Layer.merge(logging, exporter)
  })
)
