/**
 * The retention job (issue 25): expired sessions, challenges a day past their expiry, webhook
 * deliveries past KYC_WEBHOOK_RETENTION, events past EVENTS_RETENTION (issue 19), stale
 * event-stream registrations and unpaid orders past ORDER_RETENTION (issue 40) go, in bounded
 * batches; live rows stay; one replica at a time holds the job's lease, and gives it up when it stops.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Exit, Layer, Scope } from "effect"
import { Retention, RetentionLive } from "../../src/retention/Retention.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

const DAY = 24 * 60 * 60 * 1000

const retention = (env: Record<string, string> = {}) =>
  Retention.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))

/** One replica's retention job over the test's database, built in the current scope. */
const replica = (env: Record<string, string> = {}) => Effect.map(Layer.build(retention(env)), Context.get(Retention))

const at = (ms: number) => new Date(ms)

/** A run that found nothing to delete. */
const nothingLeft = {
  sessions: 0,
  challenges: 0,
  webhookDeliveries: 0,
  events: 0,
  eventStreams: 0,
  eventReplicas: 0,
  unpaidOrders: 0
}

layer(TestDatabase, { excludeTestServices: true })("retention", (it) => {
  it.scoped(
    "deletes expired sessions, day-old expired challenges, old deliveries, old events and stale stream registrations; live rows stay",
    () =>
      Effect.gen(function* () {
        const sql = yield* SqlClient.SqlClient
        const [a, b] = [yield* replica(), yield* replica()]
        const now = Date.now()
        const address = `0x${randomBytes(20).toString("hex")}`
        yield* sql`INSERT INTO users (address, created_at) VALUES (${address}, ${at(now)})`
        // 2,500 expired sessions (three batches) and one live one.
        const sessions = Array.from({ length: 2_501 }, (_, i) => ({
          tokenHash: randomBytes(32),
          address,
          createdAt: at(now - 40 * DAY),
          expiresAt: at(i === 0 ? now + DAY : now - 10 * DAY + i)
        }))
        yield* sql`INSERT INTO sessions ${sql.insert(sessions)}`
        const challenge = (nonce: string, expiresAt: number, usedAt: number | null) => ({
          nonce,
          address,
          message: "m",
          issuedAt: at(expiresAt - 10 * 60_000),
          expiresAt: at(expiresAt),
          usedAt: usedAt === null ? null : at(usedAt)
        })
        yield* sql`INSERT INTO auth_challenges ${sql.insert([
          challenge("expired2days", now - 2 * DAY, null),
          challenge("used2days", now - 2 * DAY, now - 2 * DAY - 60_000),
          challenge("expired1hour", now - 60 * 60_000, null),
          challenge("usedrecently", now + 5 * 60_000, now - 60_000),
          challenge("live", now + 5 * 60_000, null)
        ])}`
        const delivery = (id: string, receivedAt: number) => ({
          provider: "sandbox",
          deliveryId: id,
          sessionId: null,
          receivedAt: at(receivedAt)
        })
        yield* sql`INSERT INTO kyc_webhook_deliveries ${sql.insert([
          delivery("old", now - 31 * DAY),
          delivery("recent", now - 29 * DAY)
        ])}`

        // Events: one past EVENTS_RETENTION (7 days), one within it; stream registrations: one of a
        // replica whose heartbeat stopped minutes ago, one of a live replica.
        yield* sql`INSERT INTO events ${sql.insert([
          { address, id: 1, type: "strategy", data: "{}", createdAt: at(now - 8 * DAY) },
          { address, id: 2, type: "strategy", data: "{}", createdAt: at(now - 6 * DAY) }
        ])}`
        const [gone, live] = ["00000000-0000-4000-8000-00000000000a", "00000000-0000-4000-8000-00000000000b"]
        yield* sql`INSERT INTO event_replicas ${sql.insert([
          { id: gone, seenAt: at(now - 5 * 60_000) },
          { id: live, seenAt: at(now) }
        ])}`
        yield* sql`INSERT INTO event_connections ${sql.insert([
          { id: "00000000-0000-4000-8000-000000000001", address, replica: gone, openedAt: at(now - DAY) },
          { id: "00000000-0000-4000-8000-000000000002", address, replica: live, openedAt: at(now - DAY) }
        ])}`

        const ran = yield* a.run
        expect(ran).toEqual({
          sessions: 2_500,
          challenges: 2,
          webhookDeliveries: 1,
          events: 1,
          eventStreams: 1,
          eventReplicas: 1,
          unpaidOrders: 0
        })
        // The other replica skips while the first one's lease runs.
        expect(yield* b.run).toBeUndefined()

        const left = yield* sql<{
          sessions: number
          challenges: string
          deliveries: string
          events: string
          streams: string
        }>`
          SELECT (SELECT count(*)::int FROM sessions) AS sessions,
                 (SELECT string_agg(nonce, ',' ORDER BY nonce) FROM auth_challenges) AS challenges,
                 (SELECT string_agg(delivery_id, ',') FROM kyc_webhook_deliveries) AS deliveries,
                 (SELECT string_agg(id::text, ',') FROM events) AS events,
                 (SELECT string_agg(id::text, ',') FROM event_connections) AS streams`
        expect(left).toEqual([
          {
            sessions: 1,
            challenges: "expired1hour,live,usedrecently",
            deliveries: "recent",
            events: "2",
            streams: "00000000-0000-4000-8000-000000000002"
          }
        ])
        // Its holder runs it again (nothing left); the other takes over once the lease has expired.
        expect(yield* a.run).toEqual(nothingLeft)
        yield* sql`UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE name = 'retention'`
        expect(yield* b.run).toEqual(nothingLeft)
        expect(yield* a.run).toBeUndefined()
      })
  )

  it.scoped("deletes orders never paid ORDER_RETENTION after they expired, unless a payment of them was reserved", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`DELETE FROM job_leases`
      const now = Date.now()
      const order = (id: string, status: string, expiredAgo: number) => ({
        id,
        amount: "1",
        amountMicros: 1_000_000,
        description: id,
        status,
        createdAt: at(now - expiredAgo - 30 * 60_000),
        expiresAt: at(now - expiredAgo),
        payer: status === "paid" ? "0x0000000000000000000000000000000000000001" : null,
        tx: status === "paid" ? "0xab" : null,
        paidAt: status === "paid" ? at(now - expiredAgo - 60_000) : null
      })
      yield* sql`INSERT INTO orders ${sql.insert([
        order("open-8-days", "open", 8 * DAY),
        order("expired-8-days", "expired", 8 * DAY),
        order("expired-6-days", "expired", 6 * DAY),
        order("open-live", "open", -10 * 60_000),
        order("paid-8-days", "paid", 8 * DAY),
        order("failed-payment-8-days", "expired", 8 * DAY)
      ])}`
      yield* sql`INSERT INTO settlements
                   (order_id, payer, nonce, amount_atomic, valid_before, payload, status, created_at, updated_at)
                 VALUES ('failed-payment-8-days', '0x0000000000000000000000000000000000000002', '0x01', 1, 1,
                         '{}'::jsonb, 'failed', ${at(now - 8 * DAY)}, ${at(now - 8 * DAY)})`
      const ran = yield* (yield* replica()).run
      expect(ran).toEqual({ ...nothingLeft, unpaidOrders: 2 })
      const left = yield* sql<{ id: string }>`SELECT id FROM orders ORDER BY id`
      expect(left.map((row) => row.id)).toEqual(["expired-6-days", "failed-payment-8-days", "open-live", "paid-8-days"])
      // A shorter ORDER_RETENTION: the six-day-old one goes too.
      yield* sql`DELETE FROM job_leases`
      const shorter = yield* (yield* replica({ ORDER_RETENTION: "5 days" })).run
      expect(shorter).toEqual({ ...nothingLeft, unpaidOrders: 1 })
    })
  )

  it.scoped("a replica that stops gives its lease up: another runs the job at once", () =>
    Effect.gen(function* () {
      const sql = yield* SqlClient.SqlClient
      yield* sql`DELETE FROM job_leases`
      // The job's loop, as the service runs it: its first run at start takes the lease.
      const scope = yield* Scope.make()
      yield* Layer.buildWithScope(RetentionLive.pipe(Layer.provide(retention())), scope)
      const held = yield* eventually(
        "the loop's first run to take the lease",
        sql<{ holder: string }>`SELECT holder FROM job_leases WHERE name = 'retention'`,
        (rows) => rows.length === 1
      )
      const other = yield* replica()
      expect(yield* other.run).toBeUndefined()
      // The service stops: its lease goes with it, and the other replica runs the job now.
      yield* Scope.close(scope, Exit.void)
      expect(yield* sql`SELECT holder FROM job_leases WHERE name = 'retention'`).toEqual([])
      expect(yield* other.run).toEqual(nothingLeft)
      const [taken] = yield* sql<{ holder: string }>`SELECT holder FROM job_leases WHERE name = 'retention'`
      expect(taken!.holder).not.toBe(held[0]!.holder)
    })
  )
})

layer(TestDatabase, { excludeTestServices: true })("retention settings", (it) => {
  it.scoped("a webhook retention below the webhooks' 5-minute tolerance stops the start", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(replica({ KYC_WEBHOOK_RETENTION: "1 minute" }))
      expect(String(error)).toContain("KYC_WEBHOOK_RETENTION")
    })
  )
})
