/**
 * The retention job (issue 25): expired sessions, challenges a day past their expiry, webhook
 * deliveries past KYC_WEBHOOK_RETENTION, events past EVENTS_RETENTION (issue 19) and stale
 * event-stream registrations go, in bounded batches; live rows stay; one replica at a time holds the
 * job's lease.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer } from "effect"
import { Retention } from "../../src/retention/Retention.js"
import { TestDatabase } from "../support/TestDatabase.js"

const DAY = 24 * 60 * 60 * 1000

const retention = (env: Record<string, string> = {}) =>
  Retention.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))

/** One replica's retention job over the test's database, built in the current scope. */
const replica = (env: Record<string, string> = {}) => Effect.map(Layer.build(retention(env)), Context.get(Retention))

const at = (ms: number) => new Date(ms)

/** A run that found nothing to delete. */
const nothingLeft = { sessions: 0, challenges: 0, webhookDeliveries: 0, events: 0, eventStreams: 0, eventReplicas: 0 }

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
          eventReplicas: 1
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
})

layer(TestDatabase, { excludeTestServices: true })("retention settings", (it) => {
  it.scoped("a webhook retention below the webhooks' 5-minute tolerance stops the start", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(replica({ KYC_WEBHOOK_RETENTION: "1 minute" }))
      expect(String(error)).toContain("KYC_WEBHOOK_RETENTION")
    })
  )
})
