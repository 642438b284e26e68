/** The agent loop's settings (docs/agent.md "The loop"), read by the tick and by the trades it executes. */
import { Config, ConfigError, Duration, Either } from "effect"
import { durationConfig, positiveInteger } from "../runtime/Config.js"

export const loopSettings = Config.all({
  interval: durationConfig("AGENT_INTERVAL", "1 minute"),
  /** The cards' due times are spread over this much of each interval (default: all of it). */
  jitter: durationConfig("AGENT_JITTER", Duration.infinity),
  /** How often the loop looks for due cards (default: a tenth of the interval, at most 5 seconds). */
  poll: durationConfig("AGENT_POLL", Duration.infinity),
  /** Live trades of one replica in flight at once. */
  concurrency: positiveInteger("AGENT_CONCURRENCY", 8),
  /** Cards claimed at a time. */
  batch: positiveInteger("AGENT_BATCH", 1000),
  /** Pages of cards one replica works on at once. */
  pagesInFlight: positiveInteger("AGENT_PAGES_IN_FLIGHT", 2),
  /** How long a replica holds its claim on a batch, and after which an unfinished trade is the reconciler's. */
  lease: durationConfig("AGENT_LEASE", "2 minutes"),
  /** How long a trade's transaction may stay unmined before the decision is `unknown`. */
  txTimeout: durationConfig("AGENT_TX_TIMEOUT", "60 seconds"),
  /** The worst price a sale or purchase accepts, below the feed price. */
  slippage: Config.number("AGENT_SLIPPAGE").pipe(
    Config.mapOrFail((n) =>
      n >= 0 && n < 0.5
        ? Either.right(n)
        : Either.left(ConfigError.InvalidData(["AGENT_SLIPPAGE"], "Expected AGENT_SLIPPAGE to be in [0, 0.5)"))
    ),
    Config.withDefault(0.01)
  )
}).pipe(
  Config.map((settings) => ({
    ...settings,
    jitter: Duration.min(settings.jitter, settings.interval),
    poll: Duration.isFinite(settings.poll)
      ? settings.poll
      : Duration.min(Duration.millis(Duration.toMillis(settings.interval) / 10), Duration.seconds(5))
  }))
)

export type LoopSettings = Config.Config.Success<typeof loopSettings>
