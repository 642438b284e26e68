/**
 * Per-client request limits for the endpoints that create state for anonymous callers (sign-in
 * challenges and verifications, merchant orders), in fixed one-minute windows. The client is the
 * connection's address, or the first `X-Forwarded-For` entry when `TRUST_PROXY=true` (only behind a
 * proxy that sets it); an IPv6 client is its /64 (ClientAddress.ts).
 *
 * Each replica counts in memory, so a request costs no statement and no contended row, and every
 * second adds its new hits to PostgreSQL in one statement that also reads back the totals all
 * replicas wrote. A replica refuses once its own hits plus the others' as of its last sync pass the
 * limit: across replicas the limit holds within one sync interval. A client can get past it by at
 * most the hits other replicas admitted that this one has not yet seen, i.e. what it lands on them
 * in about one second (at worst, a burst sent to R replicas within the same second gets R times
 * the limit, since each replica alone never admits more than the limit).
 */
import { HttpApp, HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { Clock, Config, Effect } from "effect"
import { forkLoop } from "../lifecycle/BackgroundLoop.js"
import { traced } from "../observability/Traced.js"
import { RateLimited } from "./ApiError.js"
import { clientOf, trustProxySetting } from "./ClientAddress.js"
import { RateLimitRepo } from "./RateLimitRepo.js"

const WINDOW_MS = 60_000
/** The bound on how late a replica sees the others' hits (see above). */
const SYNC_EVERY = "1 second"
/** Windows older than this are dropped from the table by whichever replica writes a new one. */
const RETAINED_MS = 10 * WINDOW_MS

export type RateLimitName = "signin" | "orders" | "faucet" | "cardSandbox"

const rateLimitSettings = Config.all({
  signin: Config.integer("RATE_LIMIT_SIGNIN").pipe(Config.withDefault(30)),
  orders: Config.integer("RATE_LIMIT_ORDERS").pipe(Config.withDefault(60)),
  faucet: Config.integer("RATE_LIMIT_FAUCET").pipe(Config.withDefault(5)),
  cardSandbox: Config.integer("RATE_LIMIT_CARD_SANDBOX").pipe(Config.withDefault(120)),
  trustProxy: trustProxySetting
})

/** Sets the answer's `Retry-After` (seconds): a refusal that says when to come back. */
export const answerRetryAfter = (seconds: number) =>
  HttpApp.appendPreResponseHandler((_request, response) =>
    Effect.succeed(HttpServerResponse.setHeader(response, "retry-after", String(seconds)))
  )

/** One bucket's count in one window, as this replica knows it. */
interface Count {
  readonly bucket: string
  readonly windowStart: number
  /** Every replica's hits as of the last sync, plus this replica's since. */
  known: number
  /** This replica's hits not yet added to the shared count. */
  unsynced: number
}

const windowOf = (now: number) => Math.floor(now / WINDOW_MS) * WINDOW_MS
const keyOf = (bucket: string, windowStart: number) => `${windowStart} ${bucket}`

export class RateLimiter extends Effect.Service<RateLimiter>()("app/RateLimiter", {
  scoped: Effect.gen(function* () {
    const repo = yield* RateLimitRepo
    const settings = yield* rateLimitSettings
    const counts = new Map<string, Count>()
    let prunedWindow = 0

    /** Counts one request of the current client against `name`; fails with 429 past the limit. */
    const consume = traced("RateLimiter.consume")(function* (name: RateLimitName) {
      const request = yield* HttpServerRequest.HttpServerRequest
      const now = yield* Clock.currentTimeMillis
      const windowStart = windowOf(now)
      const bucket = `${name}:${clientOf(request, settings.trustProxy)}`
      const key = keyOf(bucket, windowStart)
      const count = counts.get(key) ?? { bucket, windowStart, known: 0, unsynced: 0 }
      counts.set(key, count)
      // Refused requests count too, as they always have: hammering does not reopen the window.
      count.known += 1
      count.unsynced += 1
      if (count.known > settings[name]) {
        const retryAfter = Math.ceil((windowStart + WINDOW_MS - now) / 1000)
        yield* answerRetryAfter(retryAfter)
        return yield* new RateLimited({ error: `too many requests; retry in ${retryAfter} s` })
      }
    })

    /**
     * Adds this replica's new hits to the shared counts and learns the totals; nothing when it has
     * none (an idle replica stays silent). Hits whose statement fails are kept for the next sync.
     */
    const sync = Effect.gen(function* () {
      const current = windowOf(yield* Clock.currentTimeMillis)
      const batch = [...counts.values()].filter((count) => count.unsynced > 0)
      for (const [key, count] of counts) {
        if (count.windowStart < current && count.unsynced === 0) counts.delete(key)
      }
      if (batch.length === 0) return
      const added = batch.map((count) => count.unsynced)
      for (const count of batch) count.unsynced = 0
      const totals = yield* repo
        .addHits(batch.map((count, i) => ({ bucket: count.bucket, windowStart: count.windowStart, hits: added[i]! })))
        .pipe(
          Effect.onError(() =>
            Effect.sync(() => {
              batch.forEach((count, i) => {
                count.unsynced += added[i]!
              })
            })
          )
        )
      for (const total of totals) {
        const count = counts.get(keyOf(total.bucket, total.windowStart.getTime()))
        // Hits admitted while the statement ran are this replica's on top of the total.
        if (count !== undefined) count.known = total.hits + count.unsynced
      }
      if (prunedWindow !== current) {
        yield* repo.dropWindowsBefore(new Date(current - RETAINED_MS))
        prunedWindow = current
      }
    })

    // A replica that shuts down hands its last second of hits to the others.
    yield* forkLoop("rate-limit-sync", { tick: sync, every: SYNC_EVERY, firstAfter: SYNC_EVERY, release: sync })

    return { consume, sync }
  }),
  dependencies: [RateLimitRepo.Default]
}) {}
