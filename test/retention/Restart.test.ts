/**
 * A service that stops on SIGTERM gives back what it held in the database: the retention job's
 * lease, its merchant heartbeat (its settlements are the others' at once) and its event-stream
 * replica row. So a service started again runs retention at once, within one RETENTION_INTERVAL,
 * instead of waiting three intervals for the old lease to expire. The real service, as processes.
 */
import { randomBytes } from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { devnetServiceEnv, startService, stopService } from "../support/process.js"
import { devnetWithDatabase } from "../support/TestChain.js"
import { queryDatabase as query } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"

describe("a restarted service", () => {
  it.live(
    "after a SIGTERM and a restart, retention runs within one interval: the stopped service gave its leases back",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        // An hour between runs: a run the test sees comes from a start, not from the interval.
        const env = yield* devnetServiceEnv(devnet, databaseUrl, {
          RETENTION_INTERVAL: "1 hour",
          MERCHANT_PAY_TO: privateKeyToAccount(generatePrivateKey()).address
        })
        const first = yield* startService(env)
        const leases = query(databaseUrl, "SELECT holder FROM job_leases WHERE name = 'retention'")
        yield* eventually("the first service's retention run at start", leases, (rows) => rows.length === 1, {
          explain: first.output
        })
        const heldBy = (table: string) => query(databaseUrl, `SELECT count(*)::int AS n FROM ${table}`)
        expect(yield* heldBy("merchant_replicas")).toEqual([{ n: 1 }])
        expect(yield* heldBy("event_replicas")).toEqual([{ n: 1 }])

        // A session that expired: the next run deletes it.
        const address = privateKeyToAccount(generatePrivateKey()).address
        yield* query(databaseUrl, "INSERT INTO users (address, created_at) VALUES ($1, now())", [address])
        yield* query(
          databaseUrl,
          "INSERT INTO sessions (token_hash, address, created_at, expires_at) VALUES ($1, $2, now() - interval '31 days', now() - interval '1 day')",
          [randomBytes(32), address]
        )

        expect(yield* stopService(first, "SIGTERM")).toBe(0)
        expect(yield* leases).toEqual([])
        expect(yield* heldBy("merchant_replicas")).toEqual([{ n: 0 }])
        expect(yield* heldBy("event_replicas")).toEqual([{ n: 0 }])

        const second = yield* startService(env)
        const expired = query(databaseUrl, "SELECT count(*)::int AS n FROM sessions WHERE address = $1", [address])
        yield* eventually("the restarted service's retention run", expired, (rows) => rows[0]?.n === 0, {
          explain: second.output
        })
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    300_000
  )
})
