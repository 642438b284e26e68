/** The settings of GET /me/events, read by the streams and by the retention job. */
import { Config, ConfigError, Either } from "effect"
import { durationConfig, positiveInteger } from "../runtime/Config.js"

export const eventSettings = Config.all({
  /** Ping interval; how soon sign-out, expiry, a lost notification and a stuck reader are acted on. */
  heartbeat: durationConfig("EVENTS_HEARTBEAT", "15 seconds"),
  /** How long events are kept for resuming. */
  retention: durationConfig("EVENTS_RETENTION", "7 days"),
  /** Open streams per user, across replicas (a new one closes the oldest). */
  maxStreamsPerUser: positiveInteger("EVENTS_MAX_STREAMS_PER_USER", 5),
  /** Open streams per replica. */
  maxStreams: positiveInteger("EVENTS_MAX_STREAMS", 5_000),
  /** Open streams per client address (an IPv6 /64) on a replica: below the replica's, so one client never takes them all. */
  maxStreamsPerClient: positiveInteger("EVENTS_MAX_STREAMS_PER_CLIENT", 50),
  /** A stream that sent no event this long is ended (`idle`): its client reconnects, and is admitted again. */
  idleTimeout: durationConfig("EVENTS_IDLE_TIMEOUT", "30 minutes"),
  /** A stream's outbox in this process, in bytes. */
  bufferBytes: positiveInteger("EVENTS_BUFFER_BYTES", 32 * 1024)
}).pipe(
  Config.mapOrFail((settings) =>
    settings.maxStreamsPerClient < settings.maxStreams
      ? Either.right(settings)
      : Either.left(
          ConfigError.InvalidData(
            ["EVENTS_MAX_STREAMS_PER_CLIENT"],
            "Expected EVENTS_MAX_STREAMS_PER_CLIENT to be below EVENTS_MAX_STREAMS: one client could hold every stream"
          )
        )
  )
)
