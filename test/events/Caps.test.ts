/**
 * What one client can take of a replica's event streams: a client address (an IPv6 /64) holds at
 * most EVENTS_MAX_STREAMS_PER_CLIENT (429 with Retry-After), a replica EVENTS_MAX_STREAMS (503), each
 * cap checked as a burst arrives, so 40 streams opened at once leave exactly the cap open; two
 * throw-away keys from one address cannot deny a third user a stream; the refusals are counted by
 * cap; and a stream that stays idle for EVENTS_IDLE_TIMEOUT ends, its reader coming back.
 * The client address is the `X-Forwarded-For` the test sends (TRUST_PROXY=true, as behind a proxy).
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Either } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { EventStreams } from "../../src/events/EventStreams.js"
import { serverBaseUrl } from "../kyc/helpers.js"
import { signIn } from "../support/auth.js"
import { readEvents } from "../support/events.js"
import { bearer, send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

const REPLICA_CAP = 10
const CLIENT_CAP = 4

/**
 * Opens `/me/events` as `client` and answers its status (and the refusal's body and Retry-After); an
 * opened stream stays open until the scope closes.
 */
const openAs = (token: string, client: string) =>
  Effect.acquireRelease(
    Effect.flatMap(serverBaseUrl, (base) =>
      Effect.promise(async () => {
        const controller = new AbortController()
        const response = await fetch(`${base}/me/events`, {
          headers: { ...bearer(token), "x-forwarded-for": client },
          signal: controller.signal
        })
        const body = response.status === 200 ? undefined : ((await response.json()) as { code: string })
        return { status: response.status, retryAfter: response.headers.get("retry-after"), body, controller }
      })
    ),
    ({ controller }) => Effect.sync(() => controller.abort())
  )

/** Opens every (token, client) pair's stream at once; answers their statuses in the same order. */
const openAtOnce = (pairs: ReadonlyArray<readonly [string, string]>) =>
  Effect.all(
    pairs.map(([token, client]) => openAs(token, client)),
    { concurrency: "unbounded" }
  )

const openStreams = Effect.flatMap(EventStreams, (streams) => streams.snapshot)

/** Waits until this replica holds `count` streams (a test starts from none: the previous one's have ended). */
const awaitStreams = (count: number) =>
  eventually(`the replica to hold ${count} stream(s)`, openStreams, (open) => open.length === count, {
    every: "20 millis"
  })

const refusedTotal = (cap: string) =>
  send("GET", "/metrics").pipe(
    Effect.map((metrics) => {
      const line = String(metrics.body)
        .split("\n")
        .find((candidate) => candidate.startsWith(`events_streams_refused_total{cap="${cap}"}`))
      return Number(line?.split(" ")[1] ?? 0)
    })
  )

const count = (answers: ReadonlyArray<{ readonly status: number }>, status: number) =>
  answers.filter((answer) => answer.status === status).length

const signedIn = (n: number) =>
  Effect.all(
    Array.from({ length: n }, () => signIn()),
    { concurrency: 8 }
  )

layer(
  testServer(
    {
      TRUST_PROXY: "true",
      EVENTS_MAX_STREAMS: String(REPLICA_CAP),
      EVENTS_MAX_STREAMS_PER_CLIENT: String(CLIENT_CAP),
      EVENTS_MAX_STREAMS_PER_USER: "5"
    },
    { chain: InMemoryChain.layer() }
  ),
  { excludeTestServices: true, timeout: "120 seconds" }
)("event-stream caps", (it) => {
  it.scoped(
    "40 streams from one client's /64 at once: exactly EVENTS_MAX_STREAMS_PER_CLIENT open, 429 for the rest",
    () =>
      Effect.gen(function* () {
        yield* awaitStreams(0)
        const users = yield* signedIn(40)
        const refusedBefore = yield* refusedTotal("client")
        // 40 users, 40 addresses of one /64: one client.
        const answers = yield* openAtOnce(users.map((user, i) => [user.token, `2001:db8:40:1::${i + 1}`] as const))
        expect(count(answers, 200)).toBe(CLIENT_CAP)
        expect(count(answers, 429)).toBe(40 - CLIENT_CAP)
        for (const refused of answers.filter((answer) => answer.status === 429)) {
          expect(refused.body?.code).toBe("TOO_MANY_STREAMS")
          expect(refused.retryAfter).toBe("30")
        }
        yield* awaitStreams(CLIENT_CAP)
        expect(yield* refusedTotal("client")).toBe(refusedBefore + 40 - CLIENT_CAP)
        // Another network is another client.
        expect((yield* openAs(users[0]!.token, "2001:db8:40:2::1")).status).toBe(200)
      })
  )

  it.scoped(
    "40 streams from 40 clients at once: exactly EVENTS_MAX_STREAMS open, 503 for the rest; one ends, one more opens",
    () =>
      Effect.gen(function* () {
        yield* awaitStreams(0)
        const users = yield* signedIn(40)
        const refusedBefore = yield* refusedTotal("replica")
        const answers = yield* openAtOnce(users.map((user, i) => [user.token, `198.51.100.${i + 1}`] as const))
        expect(count(answers, 200)).toBe(REPLICA_CAP)
        expect(count(answers, 503)).toBe(40 - REPLICA_CAP)
        for (const refused of answers.filter((answer) => answer.status === 503)) {
          expect(refused.body?.code).toBe("STREAMS_UNAVAILABLE")
          expect(refused.retryAfter).toBe("2")
        }
        yield* awaitStreams(REPLICA_CAP)
        expect(yield* refusedTotal("replica")).toBe(refusedBefore + 40 - REPLICA_CAP)

        // A slot is free again as soon as a stream ends.
        const refusedUser = users[answers.findIndex((answer) => answer.status === 503)]!
        expect((yield* openAs(refusedUser.token, "203.0.113.1")).status).toBe(503)
        answers.find((answer) => answer.status === 200)!.controller.abort()
        yield* awaitStreams(REPLICA_CAP - 1)
        expect((yield* openAs(refusedUser.token, "203.0.113.1")).status).toBe(200)
      })
  )

  it.scoped("two throw-away keys from one address cannot deny a third user a stream", () =>
    Effect.gen(function* () {
      yield* awaitStreams(0)
      const [first, second, third] = yield* signedIn(3)
      // Each key tries its whole per-user share at once, from one address: the address gets its cap.
      const attacker = "192.0.2.66"
      const answers = yield* openAtOnce(
        [first!, second!].flatMap((key) => Array.from({ length: 5 }, () => [key.token, attacker] as const))
      )
      expect(count(answers, 200)).toBe(CLIENT_CAP)
      expect(count(answers, 429)).toBe(10 - CLIENT_CAP)
      const reader = yield* readEvents({ token: third!.token, reconnect: false })
      yield* reader.await("the third user's ready", (event) => event.event === "ready")
      yield* awaitStreams(CLIENT_CAP + 1)
    })
  )
})

layer(
  testServer({ EVENTS_HEARTBEAT: "300 millis", EVENTS_IDLE_TIMEOUT: "1 second" }, { chain: InMemoryChain.layer() }),
  { excludeTestServices: true, timeout: "120 seconds" }
)("an idle event stream", (it) => {
  it.scoped("ends with close (idle) once it sent nothing for EVENTS_IDLE_TIMEOUT; the reader comes back", () =>
    Effect.gen(function* () {
      const { token } = yield* signIn()
      const once = yield* readEvents({ token, reconnect: false })
      const ended = yield* once.ended
      expect(Either.isRight(ended)).toBe(true)
      expect(once.received().map((event) => event.event)).toEqual(["ready", "close"])
      expect(once.received().at(-1)).toMatchObject({ event: "close", data: { reason: "idle" } })
      // The card app's reader reconnects after an idle end, as after a shutdown.
      const reader = yield* readEvents({ token })
      yield* eventually(
        "the reader's second ready",
        Effect.sync(() => reader.received().filter((event) => event.event === "ready").length),
        (readies) => readies >= 2
      )
      const metrics = String((yield* send("GET", "/metrics")).body)
      expect(metrics).toMatch(/^events_streams_closed_total\{reason="idle"\} [1-9]/m)
    })
  )
})
