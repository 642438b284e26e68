/** The settings of GET /me/events, read by the streams and by the retention job. */
import { Config } from "effect"
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
  /** A stream's outbox in this process, in bytes. */
  bufferBytes: positiveInteger("EVENTS_BUFFER_BYTES", 32 * 1024)
})
