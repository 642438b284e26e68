/**
 * One replica's LISTEN connection: a connection of its own (not from the pool), held for the life of
 * the service, reconnected with backoff whenever it is lost. Notifications only wake the streams
 * (the events table is the truth): after every (re)connection `onListening` runs, so that whatever
 * was published while nobody listened is read from the table.
 *
 * A lost connection is reported as the database's unavailability (Outages.ts): the outage's one
 * WARN, summary and INFO say it, not a line per reconnection.
 */
import { Deferred, Duration, Effect, Exit, type Scope } from "effect"
import type pg from "pg"
import { reportUnavailable } from "../observability/Outages.js"

const FIRST_RETRY = Duration.millis(100)
const LAST_RETRY = Duration.seconds(5)
const CONNECT_LIMIT = Duration.seconds(10)
const PING_LIMIT = Duration.seconds(5)

export interface ListenerOptions {
  /** A new, unconnected client (a connection of its own). */
  readonly connect: () => pg.Client
  readonly channel: string
  readonly onNotification: (payload: string) => void
  /** Listening (again): anything published meanwhile is to be read from the table. */
  readonly onListening: Effect.Effect<void>
}

export interface Listener {
  /** Pings the connection; one that does not answer in time is dropped (and reconnected). */
  readonly check: Effect.Effect<void>
}

export const listen = (options: ListenerOptions): Effect.Effect<Listener, never, Scope.Scope> =>
  Effect.gen(function* () {
    let current: pg.Client | undefined
    let lose: ((reason: string) => void) | undefined

    /** One connection: connects, listens, and answers why it ended. */
    const session = Effect.gen(function* () {
      const client = options.connect()
      const lost = yield* Deferred.make<string>()
      const end = (reason: string) => Deferred.unsafeDone(lost, Exit.succeed(reason))
      client.on("error", (error) => end(error.message))
      client.on("end", () => end("the connection ended"))
      client.on("notification", (message) => {
        if (message.channel === options.channel && message.payload !== undefined)
          options.onNotification(message.payload)
      })
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          if (current === client) {
            current = undefined
            lose = undefined
          }
          client.removeAllListeners("notification")
          client.end().catch(() => {})
        })
      )
      yield* Effect.tryPromise(async () => {
        await client.connect()
        await client.query(`LISTEN ${options.channel}`)
      }).pipe(
        Effect.timeoutFail({ duration: CONNECT_LIMIT, onTimeout: () => new Error("no answer") }),
        Effect.mapError((error) => (error instanceof Error ? error.message : String(error)))
      )
      current = client
      lose = end
      yield* options.onListening
      return yield* Deferred.await(lost)
    }).pipe(Effect.scoped)

    const loop = Effect.gen(function* () {
      let wait = FIRST_RETRY
      while (true) {
        const started = Date.now()
        const reason = yield* Effect.merge(session)
        // A connection that lasted gets the first retry again; one that keeps failing waits longer.
        if (Date.now() - started > Duration.toMillis(LAST_RETRY)) wait = FIRST_RETRY
        // Part of the database's outage, logged once with it (Outages.ts), not a line of its own.
        yield* reportUnavailable("database", `event listener: ${reason}; reconnecting`, "job")
        yield* Effect.sleep(wait)
        wait = Duration.min(Duration.times(wait, 2), LAST_RETRY)
      }
    }).pipe(Effect.annotateLogs("job", "event-listener"))

    yield* Effect.forkScoped(loop)

    const check = Effect.suspend(() => {
      const client = current
      const end = lose
      if (client === undefined || end === undefined) return Effect.void
      return Effect.tryPromise(() => client.query("SELECT 1")).pipe(
        Effect.timeout(PING_LIMIT),
        Effect.catchAll(() => Effect.sync(() => end("it did not answer a ping")))
      )
    })

    return { check }
  })
