/**
 * Retention: the rows that only grow are deleted once they are of no more use, by one background
 * job per deployment.
 *
 * - sessions: once expired (a signed-out one is deleted at sign-out);
 * - sign-in challenges: a day after they expired, used or not (a used one was used before it
 *   expired): kept that long for investigation;
 * - identity-webhook deliveries: after KYC_WEBHOOK_RETENTION (30 days). A delivery's id makes a
 *   replay count once; a replay older than the webhooks' 5-minute timestamp tolerance is refused
 *   as stale anyway, so the retention is bounded below by that tolerance;
 * - events (GET /me/events): after EVENTS_RETENTION (7 days); a stream asked to resume before the
 *   oldest kept one answers 410 EVENT_ID_EXPIRED;
 * - the event-stream registrations of a replica whose heartbeat (every EVENTS_HEARTBEAT) is four
 *   heartbeats, and at least a minute, old: that replica is gone; and its heartbeat row;
 * - orders never paid, ORDER_RETENTION (7 days) after they expired, unless a payment of them was
 *   ever reserved (its failed settlement refers to the order and is kept with it).
 *
 * Every RETENTION_INTERVAL each replica tries to take (or renew) the job's lease in the database;
 * the one that holds it runs the job, the others skip it. A replica that stops gives the lease up,
 * so another one, or the service started again, runs the job at its next try (at start-up for a
 * new process); when the holder dies instead, another replica takes over once its lease (three
 * intervals) has expired. The job deletes in bounded batches, each
 * one short statement, and at most MAX_BATCHES per table per run: a large backlog is worked off
 * over several runs without long locks or transactions.
 */
import { randomUUID } from "node:crypto"
import { Clock, Config, ConfigError, Duration, Effect, Either } from "effect"
import { eventSettings } from "../events/EventSettings.js"
import { WEBHOOK_TOLERANCE_MS } from "../kyc/KycConfig.js"
import { backgroundLoop } from "../lifecycle/BackgroundLoop.js"
import { durationConfig } from "../runtime/Config.js"
import { type Prunable, RetentionRepo } from "./RetentionRepo.js"

const JOB = "retention"
/** Rows one statement deletes. */
const BATCH = 1_000
/** Batches per table in one run. */
const MAX_BATCHES = 50
/** How long after its expiry a challenge is kept. */
const CHALLENGE_RETENTION = Duration.days(1)
/** The least a replica's event heartbeat may be late before its stream registrations count as gone. */
const STALE_STREAM_MIN_MS = 60_000

const retentionSettings = Config.all({
  events: eventSettings,
  interval: durationConfig("RETENTION_INTERVAL", "10 minutes"),
  orderRetention: durationConfig("ORDER_RETENTION", "7 days"),
  webhookRetention: durationConfig("KYC_WEBHOOK_RETENTION", "30 days").pipe(
    Config.mapOrFail((retention) =>
      Duration.toMillis(retention) < WEBHOOK_TOLERANCE_MS
        ? Either.left(
            ConfigError.InvalidData(
              ["KYC_WEBHOOK_RETENTION"],
              "Expected KYC_WEBHOOK_RETENTION to be at least the webhooks' 5-minute timestamp tolerance"
            )
          )
        : Either.right(retention)
    )
  )
})

export type Pruned = Readonly<Record<Prunable, number>>

export class Retention extends Effect.Service<Retention>()("app/Retention", {
  effect: Effect.gen(function* () {
    const repo = yield* RetentionRepo
    const settings = yield* retentionSettings
    /** This replica, as the lease's holder. */
    const holder = randomUUID()
    const leaseSeconds = Duration.toSeconds(Duration.times(settings.interval, 3))

    /** Deletes `table`'s rows past `cutoff`, batch after batch, until none is left or the run's bound. */
    const prune = (table: Prunable, cutoff: Date) =>
      Effect.iterate(
        { deleted: 0, batches: 0, last: BATCH },
        {
          while: ({ batches, last }) => last === BATCH && batches < MAX_BATCHES,
          body: ({ deleted, batches }) =>
            Effect.map(repo.deleteBatch(table, cutoff, BATCH), (last) => ({
              deleted: deleted + last,
              batches: batches + 1,
              last
            }))
        }
      ).pipe(Effect.map(({ deleted }) => deleted))

    /**
     * One run, when this replica holds the job's lease: what it deleted, or none when another
     * replica holds the lease.
     */
    const run = Effect.gen(function* () {
      if (!(yield* repo.holdLease(JOB, holder, leaseSeconds))) return undefined
      const now = yield* Clock.currentTimeMillis
      // A replica refreshes its heartbeat every EVENTS_HEARTBEAT: four missed, it is gone.
      const staleReplicas = new Date(
        now - Math.max(4 * Duration.toMillis(settings.events.heartbeat), STALE_STREAM_MIN_MS)
      )
      const pruned: Pruned = {
        sessions: yield* prune("sessions", new Date(now)),
        challenges: yield* prune("challenges", new Date(now - Duration.toMillis(CHALLENGE_RETENTION))),
        webhookDeliveries: yield* prune(
          "webhookDeliveries",
          new Date(now - Duration.toMillis(settings.webhookRetention))
        ),
        events: yield* prune("events", new Date(now - Duration.toMillis(settings.events.retention))),
        eventStreams: yield* prune("eventStreams", staleReplicas),
        eventReplicas: yield* prune("eventReplicas", staleReplicas),
        unpaidOrders: yield* prune("unpaidOrders", new Date(now - Duration.toMillis(settings.orderRetention)))
      }
      if (Object.values(pruned).some((deleted) => deleted > 0)) {
        yield* Effect.logInfo(
          `retention: deleted ${pruned.sessions} expired session(s), ${pruned.challenges} challenge(s), ` +
            `${pruned.webhookDeliveries} webhook deliver(ies), ${pruned.events} event(s), ` +
            `${pruned.eventStreams} stale event-stream registration(s), ${pruned.unpaidOrders} unpaid expired order(s)`
        )
      }
      return pruned
    }).pipe(Effect.withSpan("Retention.run"))

    return { run, release: repo.releaseLease(JOB, holder), interval: settings.interval }
  }),
  dependencies: [RetentionRepo.Default]
}) {}

/** The retention job, every RETENTION_INTERVAL from start-up, on every replica (one runs it); its lease given up at shutdown. */
export const RetentionLive = backgroundLoop(
  JOB,
  Effect.map(Retention, (retention) => ({
    tick: retention.run,
    every: retention.interval,
    release: retention.release
  }))
)
