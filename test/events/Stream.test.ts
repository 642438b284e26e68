/**
 * GET /me/events over real HTTP, read with the card app's own reader: resuming exactly once (by
 * hand and by the reader itself), the coded errors of an expired or unknown position, sign-out,
 * users kept apart while they pay at once, the per-user limit, a reader that never reads, the
 * browser's CORS preflight and the metrics. The writers are the real ones (strategy changes, x402
 * payments on the in-memory chain) except where a flood of events is needed.
 */
import { connect } from "node:net"
import { expect, layer } from "@effect/vitest"
import { Context, Effect, Either, Fiber, Layer, Schedule } from "effect"
import { parseUnits } from "viem"
import type { PrivateKeyAccount } from "viem/accounts"
import { Strategy } from "../../src/agent/Api.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import type { StreamEvent } from "../../src/events/Api.js"
import { EventStreams } from "../../src/events/EventStreams.js"
import { Events } from "../../src/events/Events.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { Retention } from "../../src/retention/Retention.js"
import { query, serverBaseUrl } from "../kyc/helpers.js"
import { cardHolder } from "../support/agent.js"
import { newAccount, signIn } from "../support/auth.js"
import { readEvents } from "../support/events.js"
import { bearer, send } from "../support/http.js"
import { startTcpProxy } from "../support/TcpProxy.js"
import { TEST_APP_URL, testServer } from "../support/TestServer.js"
import { DEFAULT_WAIT, eventually } from "../support/wait.js"
import { signPayment } from "../support/x402.js"

const merchant = newAccount()
const BUFFER_BYTES = 16 * 1024

const server = testServer(
  {
    MERCHANT_PAY_TO: merchant.address,
    EVENTS_HEARTBEAT: "300 millis",
    EVENTS_MAX_STREAMS_PER_USER: "3",
    EVENTS_BUFFER_BYTES: String(BUFFER_BYTES)
  },
  { chain: InMemoryChain.layer(), kycProvider: ScriptedKycProvider.layer() }
)

const setStrategy = (token: string, weeklySpendUsd: number) =>
  send("PUT", "/strategy", {
    headers: bearer(token),
    json: { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd }
  }).pipe(Effect.tap((response) => expect(response.status).toBe(200)))

const isStrategy = (weekly: number) => (event: StreamEvent) =>
  event.event === "strategy" && event.data.weeklySpendUsd === weekly

const strategies = (events: ReadonlyArray<StreamEvent>) =>
  events.flatMap((event) => (event.event === "strategy" ? [{ id: event.id, weekly: event.data.weeklySpendUsd }] : []))

const lastEventId = (address: string) =>
  query<{ lastId: string }>("SELECT last_id FROM event_sequences WHERE address = $1", address).pipe(
    Effect.map((rows) => Number(rows[0]?.lastId ?? 0))
  )

/** Pays a new order of `amount` with `payer`'s key through the x402 endpoint; answers the order id. */
const payOrder = (payer: PrivateKeyAccount, amount: string) =>
  Effect.gen(function* () {
    const order = yield* send("POST", "/merchant/orders", { json: { amount, description: "Event test" } })
    const offer = yield* send("GET", `/merchant/orders/${order.body.id}/pay`)
    const { header } = yield* Effect.promise(() => signPayment(payer, offer.body))
    const paid = yield* send("POST", `/merchant/orders/${order.body.id}/pay`, {
      headers: { "payment-signature": header }
    })
    expect(paid.status).toBe(200)
    return order.body.id as string
  })

/** Waits until the user has `count` open streams on this replica. */
const awaitOpenStreams = (address: string, count: number) =>
  eventually(
    `${address} to hold ${count} open stream(s)`,
    Effect.flatMap(EventStreams, (streams) => streams.snapshot).pipe(
      Effect.map((open) => open.filter((stream) => stream.address === address))
    ),
    (open) => open.length === count,
    { every: "20 millis" }
  )

layer(server, { excludeTestServices: true, timeout: "120 seconds" })("GET /me/events", (it) => {
  it.scoped(
    "reconnect with Last-Event-ID: read 3, 5 happen meanwhile, the new stream gets exactly those 5, then live",
    () =>
      Effect.gen(function* () {
        const { token } = yield* cardHolder()
        const first = yield* readEvents({ token, reconnect: false })
        const ready = yield* first.await("ready", (event) => event.event === "ready")
        for (const weekly of [1, 2, 3]) yield* setStrategy(token, weekly)
        yield* first.await("the third strategy", isStrategy(3))
        yield* first.stop
        const read = strategies(first.received())
        // Ids go up by one with each event of the user.
        const start = ready.event === "ready" ? ready.id : Number.NaN
        expect(read).toEqual([1, 2, 3].map((weekly) => ({ id: start + weekly, weekly })))

        for (const weekly of [4, 5, 6, 7, 8]) yield* setStrategy(token, weekly)
        const last = read[2]!.id
        const resumed = yield* readEvents({ token, reconnect: false, lastEventId: last })
        yield* resumed.await("the fifth missed strategy", isStrategy(8))
        yield* setStrategy(token, 9)
        yield* resumed.await("the live strategy", isStrategy(9))
        const [again, ...rest] = resumed.received()
        expect(again).toEqual({
          event: "ready",
          id: last,
          data: { kyc: "approved", cardUsd1: 0, lastEventId: last + 5 }
        })
        expect(rest).toHaveLength(6)
        expect(strategies(rest)).toEqual([4, 5, 6, 7, 8, 9].map((weekly, i) => ({ id: last + 1 + i, weekly })))
      })
  )

  it.scoped("the reader resumes by itself after its connection is cut: every event once, in order", () =>
    Effect.gen(function* () {
      const { token, account } = yield* cardHolder()
      const target = new URL(yield* serverBaseUrl)
      const proxy = yield* startTcpProxy({ host: target.hostname, port: Number(target.port) })
      const events = yield* readEvents({ token, baseUrl: proxy.url(target.origin) })
      yield* events.await("ready", (event) => event.event === "ready")
      yield* setStrategy(token, 1)
      yield* events.await("strategy 1", isStrategy(1))
      proxy.setMode("refuse")
      yield* awaitOpenStreams(account.address, 0)
      // Written while the client is cut off: it reads them on its return, from its last id.
      yield* setStrategy(token, 2)
      yield* setStrategy(token, 3)
      proxy.setMode("forward")
      yield* events.await("strategy 3", isStrategy(3))
      yield* setStrategy(token, 4)
      yield* events.await("strategy 4", isStrategy(4))
      const received = events.received()
      expect(received.filter((event) => event.event === "ready").length).toBeGreaterThanOrEqual(2)
      const got = strategies(received)
      expect(got.map((s) => s.weekly)).toEqual([1, 2, 3, 4])
      expect(got.map((s) => s.id - got[0]!.id)).toEqual([0, 1, 2, 3])
    })
  )

  it.scoped("an event whose notification never came is read from the table within a heartbeat", () =>
    Effect.gen(function* () {
      const { token, account } = yield* cardHolder()
      const reader = yield* readEvents({ token })
      yield* reader.await("ready", (event) => event.event === "ready")
      // Written as a writer does, but with no NOTIFY: as if the notification were lost.
      const data = JSON.stringify({ targets: { NVDA: 1 }, weeklySpendUsd: 42, timeZone: "UTC", updatedAt: 1 })
      yield* query(
        `WITH taken AS (UPDATE event_sequences SET last_id = last_id + 1 WHERE address = $1 RETURNING last_id)
         INSERT INTO events (address, id, type, data, created_at)
         SELECT $1, last_id, 'strategy', $2::json, clock_timestamp() FROM taken`,
        account.address,
        data
      )
      yield* reader.await("the unannounced strategy", isStrategy(42))
    })
  )

  it.scoped("the listening connection is lost: it comes back, and what was written meanwhile arrives", () =>
    Effect.gen(function* () {
      const { token } = yield* cardHolder()
      const reader = yield* readEvents({ token })
      yield* reader.await("ready", (event) => event.event === "ready")
      const listeners = query<{ pid: number }>(
        "SELECT pid FROM pg_stat_activity WHERE application_name = 'card-service events' AND datname = current_database()"
      )
      const [before] = yield* listeners
      expect(before).toBeDefined()
      yield* query("SELECT pg_terminate_backend($1)", before!.pid)
      yield* setStrategy(token, 11)
      yield* eventually(
        "the event listener to reconnect",
        listeners,
        (rows) => rows.length === 1 && rows[0]!.pid !== before!.pid,
        { every: "20 millis" }
      )
      yield* setStrategy(token, 12)
      yield* reader.await("the strategy written after the reconnection", isStrategy(12))
      expect(strategies(reader.received()).map((s) => s.weekly)).toEqual([11, 12])
    })
  )

  it.scoped("a position whose next events were pruned is 410 EVENT_ID_EXPIRED, a newer one 410 EVENT_ID_UNKNOWN", () =>
    Effect.gen(function* () {
      const { token, account } = yield* cardHolder()
      for (const weekly of [1, 2, 3, 4]) yield* setStrategy(token, weekly)
      const newest = yield* lastEventId(account.address)
      // Every event but the newest two is older than the retention (7 days).
      yield* query(
        "UPDATE events SET created_at = now() - interval '8 days' WHERE address = $1 AND id <= $2",
        account.address,
        newest - 2
      )
      // The retention job, as a replica that takes its lease now runs it.
      yield* query("DELETE FROM job_leases")
      const retention = yield* Effect.map(Layer.build(Retention.Default), Context.get(Retention))
      yield* retention.run
      expect(yield* query("SELECT id FROM events WHERE address = $1 ORDER BY id", account.address)).toEqual([
        { id: String(newest - 1) },
        { id: String(newest) }
      ])
      const from = (headers: Record<string, string>, path = "/me/events") =>
        send("GET", path, { headers: { ...bearer(token), ...headers } })
      const expired = yield* from({ "last-event-id": String(newest - 3) })
      expect(expired.status).toBe(410)
      expect(expired.body).toEqual({ error: expect.stringContaining("re-read"), code: "EVENT_ID_EXPIRED" })
      expect((yield* from({}, `/me/events?lastEventId=${newest - 3}`)).body.code).toBe("EVENT_ID_EXPIRED")
      const unknown = yield* from({ "last-event-id": String(newest + 1) })
      expect(unknown.status).toBe(410)
      expect(unknown.body.code).toBe("EVENT_ID_UNKNOWN")
      const malformed = yield* from({ "last-event-id": "12abc" })
      expect(malformed.status).toBe(400)
      expect(malformed.body).toEqual({ error: expect.stringContaining("last-event-id"), code: "BAD_REQUEST" })

      // Right before the oldest kept event: the kept ones, and nothing was lost.
      const resumed = yield* readEvents({ token, reconnect: false, lastEventId: newest - 2 })
      yield* resumed.await("the newest strategy", isStrategy(4))
      expect(strategies(resumed.received()).map((s) => s.weekly)).toEqual([3, 4])
      yield* resumed.stop
      // The header wins over the query parameter.
      const url = `${yield* serverBaseUrl}/me/events?lastEventId=${newest - 3}`
      const status = yield* Effect.promise(async () => {
        const response = await fetch(url, { headers: { ...bearer(token), "last-event-id": String(newest) } })
        await response.body?.cancel()
        return response.status
      })
      expect(status).toBe(200)
    })
  )

  it.scoped("sign-out closes the session's streams within a heartbeat; the user's other session keeps its stream", () =>
    Effect.gen(function* () {
      const { token, account } = yield* cardHolder()
      const other = yield* signIn(account)
      const first = yield* readEvents({ token })
      const second = yield* readEvents({ token })
      const kept = yield* readEvents({ token: other.token })
      for (const reader of [first, second, kept]) yield* reader.await("ready", (event) => event.event === "ready")
      expect((yield* send("POST", "/auth/signout", { headers: bearer(token) })).status).toBe(204)
      for (const reader of [first, second]) {
        const ended = yield* reader.ended
        expect(Either.isLeft(ended) && ended.left.code).toBe("signed-out")
        expect(reader.received().at(-1)).toMatchObject({ event: "close", data: { reason: "signed-out" } })
      }
      yield* setStrategy(other.token, 7)
      yield* kept.await("the strategy set by the other session", isStrategy(7))
      yield* awaitOpenStreams(account.address, 1)
      // The signed-out token opens nothing.
      expect((yield* send("GET", "/me/events", { headers: bearer(token) })).status).toBe(401)
    })
  )

  it.scoped("a session that expires: its stream ends with close (session-expired) within a heartbeat", () =>
    Effect.gen(function* () {
      const { token, account } = yield* signIn()
      const reader = yield* readEvents({ token })
      yield* reader.await("ready", (event) => event.event === "ready")
      yield* query("UPDATE sessions SET expires_at = now() WHERE address = $1", account.address)
      const ended = yield* reader.ended
      expect(Either.isLeft(ended) && ended.left.code).toBe("session-expired")
      expect(reader.received().at(-1)).toMatchObject({ event: "close", data: { reason: "session-expired" } })
    })
  )

  it.scoped("two users paying at once: each stream carries exactly its own user's payments", () =>
    Effect.gen(function* () {
      const chain = yield* InMemoryChain
      const users = yield* Effect.all([signIn(), signIn()])
      for (const user of users) yield* chain.mint(chain.usd1.address, user.account.address, parseUnits("100", 18))
      const readers = yield* Effect.forEach(users, (user) => readEvents({ token: user.token }))
      for (const reader of readers) yield* reader.await("ready", (event) => event.event === "ready")
      const paid = yield* Effect.forEach(
        users,
        (user) =>
          Effect.all(
            ["1.5", "2.25", "3"].map((amount) => payOrder(user.account, amount)),
            { concurrency: "unbounded" }
          ),
        { concurrency: "unbounded" }
      )
      for (const [i, reader] of readers.entries()) {
        yield* reader.await("the third payment", (event) => event.event === "payment" && event.id === 3)
        const [ready, ...rest] = reader.received()
        expect(ready).toMatchObject({ event: "ready", id: 0, data: { kyc: "none", cardUsd1: null, lastEventId: 0 } })
        expect(rest.map((event) => event.event)).toEqual(["payment", "payment", "payment"])
        expect(rest.map((event) => (event.event === "close" ? undefined : event.id))).toEqual([1, 2, 3])
        expect(new Set(rest.map((event) => (event.event === "payment" ? event.data.id : "")))).toEqual(new Set(paid[i]))
      }
      // The statement says the same as the events.
      const statement = yield* send("GET", "/me/activity", { headers: bearer(users[0]!.token) })
      const events = readers[0]!.received().flatMap((event) => (event.event === "payment" ? [event.data] : []))
      expect(new Set(statement.body)).toEqual(new Set(events.map((item) => ({ ...item }))))
    })
  )

  it.scoped("more than EVENTS_MAX_STREAMS_PER_USER streams: the oldest is closed (replaced)", () =>
    Effect.gen(function* () {
      const { token, account } = yield* signIn()
      const readers = []
      for (let i = 0; i < 4; i++) {
        const reader = yield* readEvents({ token })
        yield* reader.await("ready", (event) => event.event === "ready")
        readers.push(reader)
      }
      const ended = yield* readers[0]!.ended
      expect(Either.isLeft(ended) && ended.left.code).toBe("replaced")
      yield* awaitOpenStreams(account.address, 3)
    })
  )

  it.scoped("40 streams of one user opened at once leave exactly EVENTS_MAX_STREAMS_PER_USER open", () =>
    Effect.gen(function* () {
      const { token, account } = yield* signIn()
      const readers = yield* Effect.all(
        Array.from({ length: 40 }, () => readEvents({ token, reconnect: false })),
        { concurrency: "unbounded" }
      )
      const replaced = () =>
        readers.filter((reader) =>
          reader.received().some((event) => event.event === "close" && event.data.reason === "replaced")
        )
      yield* eventually(
        "37 of the 40 streams closed as replaced",
        Effect.sync(replaced),
        (closed) => closed.length === 37
      )
      yield* awaitOpenStreams(account.address, 3)
      const registered = yield* query<{ n: number }>(
        "SELECT count(*)::int AS n FROM event_connections WHERE address = $1",
        account.address
      )
      expect(registered).toEqual([{ n: 3 }])
      // The three left are live: each gets the user's next event.
      const open = readers.filter((reader) => !replaced().includes(reader))
      yield* Effect.forEach(open, (reader) => reader.await("ready", (event) => event.event === "ready"))
      const events = yield* Events
      yield* events.publishAll([
        {
          address: account.address,
          event: {
            type: "strategy",
            data: new Strategy({ targets: { NVDA: 1 }, weeklySpendUsd: 77, timeZone: "UTC", updatedAt: Date.now() })
          }
        }
      ])
      for (const reader of open) yield* reader.await("the strategy after the burst", isStrategy(77))
    })
  )

  it.scoped("a reader that never reads is cut as too slow; what the service holds for it stays within its bound", () =>
    Effect.gen(function* () {
      const { token, account } = yield* signIn()
      const streams = yield* EventStreams
      const events = yield* Events
      const base = new URL(yield* serverBaseUrl)
      const socket = connect(Number(base.port), base.hostname)
      socket.pause()
      socket.write(`GET /me/events HTTP/1.1\r\nHost: ${base.host}\r\nAuthorization: Bearer ${token}\r\n\r\n`)
      const [stream] = yield* awaitOpenStreams(account.address, 1)
      // What the service holds for the stream, sampled until the stream is gone.
      const samples: Array<{ readonly pending: number; readonly socket: number }> = []
      const sampler = yield* streams.snapshot.pipe(
        Effect.tap((open) =>
          Effect.sync(() => {
            const found = open.find((candidate) => candidate.id === stream!.id)
            if (found !== undefined) samples.push({ pending: found.pendingBytes, socket: found.socketBytes })
          })
        ),
        Effect.repeat(Schedule.spaced("5 millis")),
        Effect.forkScoped
      )
      // About 30 MB of events, far beyond the socket buffers.
      const targets = Object.fromEntries(Array.from({ length: 400 }, (_, i) => [`TOKEN${i}`, 1 / 400]))
      for (let batch = 0; batch < 12; batch++) {
        yield* events.publishAll(
          Array.from({ length: 250 }, (_, i) => ({
            address: account.address,
            event: {
              type: "strategy" as const,
              data: new Strategy({ targets, weeklySpendUsd: batch * 250 + i, timeZone: "UTC", updatedAt: Date.now() })
            }
          }))
        )
      }
      yield* awaitOpenStreams(account.address, 0)
      yield* Fiber.interrupt(sampler)
      // The outbox stayed within its bound, filled up, and the socket held at most one write of it more.
      expect(Math.max(...samples.map((sample) => sample.pending))).toBeLessThanOrEqual(BUFFER_BYTES)
      expect(Math.max(...samples.map((sample) => sample.pending))).toBeGreaterThan(BUFFER_BYTES / 2)
      expect(Math.max(...samples.map((sample) => sample.pending + sample.socket))).toBeLessThanOrEqual(
        2 * BUFFER_BYTES + 64 * 1024
      )
      const metrics = yield* send("GET", "/metrics")
      expect(metrics.body).toMatch(/events_streams_closed_total\{reason="too-slow"\} [1-9]/)
      // The client, reading at last, gets what the buffers held, then the end: not the 30 MB.
      const received = yield* Effect.async<number>((resume) => {
        let bytes = 0
        socket.on("data", (chunk) => {
          bytes += chunk.length
        })
        socket.on("close", () => resume(Effect.succeed(bytes)))
        socket.on("error", () => {})
        socket.resume()
      }).pipe(
        Effect.timeoutFail({
          duration: DEFAULT_WAIT,
          onTimeout: () => new Error("the slow reader's connection did not end once read")
        }),
        Effect.orDie
      )
      expect(received).toBeGreaterThan(0)
      expect(received).toBeLessThan(20 * 1024 * 1024)
    })
  )

  it.scoped("the response is an uncached text/event-stream that starts with the reconnection delay and ready", () =>
    Effect.gen(function* () {
      const { token } = yield* signIn()
      const base = yield* serverBaseUrl
      const first = yield* Effect.acquireRelease(
        Effect.promise(async () => {
          const controller = new AbortController()
          const response = await fetch(`${base}/me/events`, { headers: bearer(token), signal: controller.signal })
          const reader = response.body!.getReader()
          const decoder = new TextDecoder()
          let text = ""
          while (!text.includes("\n\n")) {
            const { done, value } = await reader.read()
            if (done) break
            text += decoder.decode(value, { stream: true })
          }
          return { response, text, controller }
        }),
        ({ controller }) => Effect.sync(() => controller.abort())
      ).pipe(
        Effect.timeoutFail({ duration: DEFAULT_WAIT, onTimeout: () => new Error("no ready frame on the raw stream") }),
        Effect.orDie
      )
      expect(first.response.status).toBe(200)
      expect(first.response.headers.get("content-type")).toBe("text/event-stream; charset=utf-8")
      expect(first.response.headers.get("cache-control")).toBe("no-store")
      expect(first.response.headers.get("x-request-id")).toMatch(/./)
      expect(first.text).toBe(
        'retry: 2000\nevent: ready\nid: 0\ndata: {"kyc":"none","cardUsd1":null,"lastEventId":0}\n\n'
      )
    })
  )

  it.effect("a browser on WEB_ORIGIN may send the bearer token and Last-Event-ID (CORS preflight)", () =>
    Effect.gen(function* () {
      const preflight = yield* send("OPTIONS", "/me/events", {
        headers: {
          origin: TEST_APP_URL,
          "access-control-request-method": "GET",
          "access-control-request-headers": "authorization, last-event-id"
        }
      })
      expect(preflight.status).toBe(204)
      expect(preflight.headers["access-control-allow-origin"]).toBe(TEST_APP_URL)
      const allowed = preflight.headers["access-control-allow-headers"]!.split(",").map((name) => name.trim())
      expect(allowed).toEqual(expect.arrayContaining(["authorization", "last-event-id"]))
    })
  )

  it.scoped("metrics: open streams, events sent by type, notification lag", () =>
    Effect.gen(function* () {
      const { token } = yield* cardHolder()
      const reader = yield* readEvents({ token })
      yield* reader.await("ready", (event) => event.event === "ready")
      yield* setStrategy(token, 5)
      yield* reader.await("strategy", isStrategy(5))
      const metrics = String((yield* send("GET", "/metrics")).body)
      expect(metrics).toMatch(/^events_open_streams [1-9]/m)
      expect(metrics).toMatch(/^events_sent_total\{type="strategy"\} [1-9]/m)
      expect(metrics).toMatch(/^events_sent_total\{type="ready"\} [1-9]/m)
      expect(metrics).toMatch(/^events_notification_lag_seconds_count [1-9]/m)
      expect(metrics).toContain("# TYPE events_notification_lag_seconds histogram")
    })
  )
})
