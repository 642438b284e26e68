/**
 * Logs (JSON lines by default, `LOG_FORMAT=pretty` for humans) and, when
 * `OTEL_EXPORTER_OTLP_ENDPOINT` is set, OTLP/HTTP export of traces, logs and metrics.
 * Nothing secret is ever put in a log annotation or span attribute by this service.
 */
import * as Otlp from "@effect/opentelemetry/Otlp"
import { FetchHttpClient } from "@effect/platform"
import { Effect, Layer, Logger, Option } from "effect"
import { AppConfig } from "./Config.js"
import { SERVICE_NAME, SERVICE_VERSION } from "./ServiceInfo.js"

export const ObservabilityLive = Layer.unwrapEffect(
  Effect.gen(function* () {
    const config = yield* AppConfig
    const logging = Layer.merge(
      config.logFormat === "json" ? Logger.json : Logger.pretty,
      Logger.minimumLogLevel(config.logLevel)
    )
    if (Option.isNone(config.otlpEndpoint)) return logging
    const exporter = Otlp.layerJson({
      baseUrl: config.otlpEndpoint.value,
      resource: { serviceName: SERVICE_NAME, serviceVersion: SERVICE_VERSION }
    }).pipe(Layer.provide(FetchHttpClient.layer))
    return Layer.merge(logging, exporter)
  })
)
