import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs"
import { connect } from "node:net"
import { tmpdir } from "node:os"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { freePort, isAlive } from "../../src/EmbeddedPostgres.js"
import { startService, stopService } from "../support/process.js"

/** A fresh data directory the embedded server's `postgres` user can enter when we run as root. */
const freshDataDir = () => {
  const dir = mkdtempSync(path.join(tmpdir(), "card-service-e2e-"))
  chmodSync(dir, 0o755)
  return dir
}

const postmasterPid = (dataDir: string) => {
  const file = path.join(dataDir, "pg", "postmaster.pid")
  return existsSync(file) ? Number(readFileSync(file, "utf8").split("\n")[0]) : undefined
}

describe("npm start on embedded defaults", () => {
  it.live(
    "serves /health and /ready with no configuration, and SIGTERM shuts down cleanly",
    () =>
      Effect.gen(function* () {
        const dataDir = freshDataDir()
        const port = String(yield* freePort)
        const service = yield* startService({ PORT: port, DATA_DIR: dataDir })
        const ready = yield* Effect.promise(() => fetch(`${service.baseUrl}/ready`))
        expect(ready.status).toBe(200)
        const pid = postmasterPid(dataDir)
        expect(pid).toBeDefined()
        const anvilPid = Number(readFileSync(path.join(dataDir, "chain", "anvil.pid"), "utf8"))
        expect(isAlive(anvilPid)).toBe(true)
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
        // The embedded PostgreSQL and the devnet went down with the service.
        expect(isAlive(pid!)).toBe(false)
        expect(isAlive(anvilPid)).toBe(false)
        // Logs are JSON lines by default.
        const lines = service
          .output()
          .trim()
          .split("\n")
          .filter((line) => line.startsWith("{"))
        expect(lines.length).toBeGreaterThan(0)
        for (const line of lines) expect(() => JSON.parse(line)).not.toThrow()
        rmSync(dataDir, { recursive: true, force: true })
      }),
    120_000
  )

  it.live(
    "recovers after a hard kill that left the embedded PostgreSQL running",
    () =>
      Effect.gen(function* () {
        const dataDir = freshDataDir()
        const port = String(yield* freePort)
        const first = yield* startService({ PORT: port, DATA_DIR: dataDir })
        const challenge = yield* Effect.promise(() =>
          fetch(`${first.baseUrl}/auth/challenge`, {
            method: "POST",
            headers: { "content-type": "application/json" },
            body: JSON.stringify({ address: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" })
          })
        )
        expect(challenge.status).toBe(200)
        const orphan = postmasterPid(dataDir)!
        yield* stopService(first, "SIGKILL")
        expect(isAlive(orphan)).toBe(true)

        const second = yield* startService({ PORT: port, DATA_DIR: dataDir })
        expect(isAlive(orphan)).toBe(false)
        expect((yield* Effect.promise(() => fetch(`${second.baseUrl}/ready`))).status).toBe(200)
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
        rmSync(dataDir, { recursive: true, force: true })
      }),
    120_000
  )

  it.live(
    "a client that never finishes its request cannot hold up shutdown past SHUTDOWN_GRACE",
    () =>
      Effect.gen(function* () {
        const dataDir = freshDataDir()
        const port = yield* freePort
        const service = yield* startService({ PORT: String(port), DATA_DIR: dataDir, SHUTDOWN_GRACE: "1 second" })
        // Headers never completed: the connection is busy, so a plain close would wait for it.
        const socket = connect(port, "127.0.0.1")
        yield* Effect.async<void>((resume) => {
          socket.once("connect", () => resume(Effect.void))
        })
        socket.write("GET /health HTTP/1.1\r\nHost: localhost\r\n")
        const started = Date.now()
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
        expect(Date.now() - started).toBeLessThan(15_000)
        socket.destroy()
        rmSync(dataDir, { recursive: true, force: true })
      }),
    120_000
  )
})
