/**
 * The retention job (issue 25): expired sessions, challenges a day past their expiry and webhook
 * deliveries past KYC_WEBHOOK_RETENTION go, in bounded batches; live rows stay; one replica at a
 * time holds the job's lease.
 */
import { randomBytes } from "node:crypto"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Context, Effect, Layer } from "effect"
import { Retention } from "../src/Retention.js"
import { TestDatabase } from "./support/TestDatabase.js"

const DAY = 24 * 60 * 60 * 1000

const retention = (env: Record<string, string> = {}) =>
  Retention.Default.pipe(Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env))))))

/** One replica's retention job over the test's database, built in the current scope. */
const replica = (env: Record<string, string> = {}) => Effect.map(Layer.build(retention(env)), Context.get(Retention))

const at = (ms: number) => new Date(ms)

layer(TestDatabase, { excludeTestServices: true })("retention", (it) => {
  it.scoped("deletes expired sessions, day-old expired challenges and old deliveries; live rows stay", () =>
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

      const ran = yield* a.run
      expect(ran).toEqual({ sessions: 2_500, challenges: 2, webhookDeliveries: 1 })
      // The other replica skips while the first one's lease runs.
      expect(yield* b.run).toBeUndefined()

      const left = yield* sql<{ sessions: number; challenges: string; deliveries: string }>`
          SELECT (SELECT count(*)::int FROM sessions) AS sessions,
                 (SELECT string_agg(nonce, ',' ORDER BY nonce) FROM auth_challenges) AS challenges,
                 (SELECT string_agg(delivery_id, ',') FROM kyc_webhook_deliveries) AS deliveries`
      expect(left).toEqual([{ sessions: 1, challenges: "expired1hour,live,usedrecently", deliveries: "recent" }])
      // Its holder runs it again (nothing left); the other takes over once the lease has expired.
      expect(yield* a.run).toEqual({ sessions: 0, challenges: 0, webhookDeliveries: 0 })
      yield* sql`UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE name = 'retention'`
      expect(yield* b.run).toEqual({ sessions: 0, challenges: 0, webhookDeliveries: 0 })
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
