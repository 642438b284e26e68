/**
 * Runs the service's main layer. When it fails (bad configuration, an embedded server that does not
 * start, an unreachable database), or later when an embedded server is lost for good (it exited and
 * could not be restarted, see `superviseServer`), every resource already acquired is released first
 * (embedded servers stopped), then one fatal log line in the service's log format says what failed,
 * and the process exits with code 1 for a supervisor to restart it.
 */
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Config, ConfigError, Deferred, Effect, Layer, Logger, Option } from "effect"
import { EmbeddedServerError, EmbeddedServerLost, ServiceHalt } from "../embedded/EmbeddedServer.js"
import { describeError } from "../observability/ErrorLine.js"
import { JsonLogLive } from "../observability/LogSink.js"
import { SERVICE_NAME } from "../runtime/ServiceInfo.js"

/** The configured log format, JSON when the configuration itself is what failed. */
const startLogger = Config.literal(
  "json",
  "pretty"
)("LOG_FORMAT").pipe(
  Config.withDefault("json" as const),
  Effect.orElseSucceed(() => "json" as const),
  Effect.map((format) => (format === "json" ? JsonLogLive : Logger.pretty))
)

/** The fatal line's message and annotations for what ended the start (or the service). */
const describeFailure = (error: unknown): { message: string; annotations: Record<string, unknown> } => {
  // an EmbeddedServerError's message already says its cause
  if (error instanceof EmbeddedServerError) {
    return { message: `start failed: ${error.message}`, annotations: { server: error.server, path: error.path } }
  }
  if (error instanceof EmbeddedServerLost) {
    return { message: `stopping: ${error.message}`, annotations: { server: error.server, path: error.path } }
  }
  if (ConfigError.isConfigError(error)) {
    return { message: `start failed: invalid configuration: ${String(error)}`, annotations: { error: "ConfigError" } }
  }
  const tag = typeof error === "object" && error !== null && "_tag" in error ? error._tag : "Error"
  if (tag === "ServeError") {
    const listen = (error as { readonly cause?: NodeJS.ErrnoException & { address?: string; port?: number } }).cause
    if (listen?.code === "EADDRINUSE" || listen?.code === "EACCES") {
      const where = `${listen.address ?? "HOST"}:${listen.port ?? "PORT"}`
      const message =
        listen.code === "EADDRINUSE"
          ? `start failed: ${where} is already in use: stop the process listening there or choose another PORT`
          : `start failed: no permission to listen on ${where}: choose a PORT above 1023`
      return { message, annotations: { error: listen.code, port: listen.port } }
    }
  }
  return { message: `start failed: ${describeError(error)}`, annotations: { error: tag } }
}

const logFailure = (cause: Cause.Cause<unknown>) =>
  Effect.gen(function* () {
    if (Cause.isInterruptedOnly(cause)) return
    const error = Option.getOrElse(
      Option.orElse(Cause.failureOption(cause), () => Cause.dieOption(cause)),
      () => Cause.squash(cause)
    )
    const { message, annotations } = describeFailure(error)
    yield* Effect.logFatal(message).pipe(Effect.annotateLogs(annotations), Effect.provide(yield* startLogger))
  })

/**
 * Builds the layer and runs until SIGTERM/SIGINT interrupt it (exit 0), or until `ServiceHalt` is
 * called: then the layer's scope closes before the failure is reported (exit 1).
 */
const runUntilHalted = <E>(layer: Layer.Layer<never, E>) =>
  Effect.gen(function* () {
    const halted = yield* Deferred.make<never, EmbeddedServerLost>()
    const halt = ServiceHalt.of({ halt: (error) => Deferred.fail(halted, error).pipe(Effect.asVoid) })
    yield* Layer.build(Layer.provide(layer, Layer.succeed(ServiceHalt, halt)))
    return yield* Deferred.await(halted)
  }).pipe(Effect.scoped)

/** `npm start`: launches the layer; SIGTERM/SIGINT interrupt it (exit 0), a failure exits 1. */
export const launch = <E>(layer: Layer.Layer<never, E>) =>
  runUntilHalted(layer).pipe(
    Effect.tapErrorCause(logFailure),
    // After every resource is released, so it is the last line; the service's logger is gone by then.
    Effect.onInterrupt(() =>
      Effect.flatMap(startLogger, (logger) => Effect.logInfo(`${SERVICE_NAME} stopped`).pipe(Effect.provide(logger)))
    ),
    NodeRuntime.runMain({ disablePrettyLogger: true, disableErrorReporting: true })
  )
