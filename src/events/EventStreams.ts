/**
 * This replica's `GET /me/events` streams.
 *
 * The events table is the only source of what a stream sends; nothing reaches a stream from memory
 * of another request. One dispatcher fiber reads, for every user whose streams may be behind, the
 * events after the lowest position among that user's streams (one query for many users), renders
 * each event once and hands it to each of the user's streams that is exactly one event before it
 * (`nextRun`): an event is never skipped nor sent twice on a stream, whatever the order in which
 * notifications, reconnections and catch-ups arrive.
 *
 * What marks a user as possibly behind: a notification from the LISTEN connection (one per replica,
 * `EventListener`), a new stream, a reconnected listener (every user), a stream whose outbox drained
 * after refusing an event, and the heartbeat's comparison with each user's newest id (should a
 * notification ever be lost without the connection dropping).
 *
 * Bounds: each stream's outbox holds at most EVENTS_BUFFER_BYTES; a stream whose writer took
 * nothing between two heartbeats while frames waited is cut (`too-slow`); a stream that sent no event
 * for EVENTS_IDLE_TIMEOUT is ended (`idle`: its client reconnects, and is admitted again); at most
 * EVENTS_MAX_STREAMS_PER_USER streams per user across replicas (the oldest is closed: registrations
 * of one user take turns, so a burst never leaves one more), and on this replica
 * EVENTS_MAX_STREAMS_PER_CLIENT per client address (429) below EVENTS_MAX_STREAMS in all (503): a
 * replica's slots are taken when a stream is admitted, in the step that checks them, so a burst never
 * opens one more either. The heartbeat also closes the streams whose session was signed out or
 * expired, and asks the identity provider about a pending check (as GET /me does).
 *
 * One file because the dispatcher, the streams' registry and the heartbeat share one state (each
 * stream's position and outbox): split apart, each would reach into the others'.
 */
import { randomUUID } from "node:crypto"
import { Readable } from "node:stream"
import { type HttpServerRequest, HttpServerResponse } from "@effect/platform"
import { NodeHttpServerRequest } from "@effect/platform-node"
import { Cause, Clock, Duration, Effect, Exit, Option, Runtime, Schema, type Tracer } from "effect"
import { formatUnits } from "viem"
import { Standing } from "../account/Standing.js"
import { Card } from "../cards/Card.js"
import { Cards } from "../cards/Cards.js"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { clientOf, trustProxySetting } from "../http/ClientAddress.js"
import { answerRetryAfter } from "../http/RateLimit.js"
import { Kyc } from "../kyc/Kyc.js"
import type { KycState } from "../kyc/KycState.js"
import { forkLoop } from "../lifecycle/BackgroundLoop.js"
import {
  countEventsSent,
  countStreamClosed,
  countStreamRefused,
  recordNotificationLag,
  setOpenStreams
} from "../observability/Metrics.js"
import { outageOf, reportUnavailable } from "../observability/Outages.js"
import { traced } from "../observability/Traced.js"
import { AppConfig } from "../runtime/Config.js"
import { DatabasePool } from "../storage/Database.js"
import { type CloseReason, EventIdExpired, EventIdUnknown, StreamsUnavailable, TooManyStreams } from "./Api.js"
import { listen } from "./EventListener.js"
import { EVENTS_CHANNEL, EventRepo, type StoredEvent } from "./EventRepo.js"
import { eventSettings } from "./EventSettings.js"
import { Outbox } from "./Outbox.js"
import { nextRun, startPoint } from "./Resume.js"
import { formatComment, formatFrame } from "./Sse.js"

/** What a client waits before reconnecting (the SSE `retry:` field), in ms. */
const RECONNECT_MS = 2_000
/** Events read per user at a time, and users per read. */
const PAGE = 200
const USERS_PER_READ = 500
/** After a failed read, the dispatcher waits this long before trying again. */
const READ_RETRY = "1 second"
/** At shutdown, how long the streams have to send their `close` before they are cut. */
const SHUTDOWN_WAIT_MS = 2_000
/** What a client over its cap is told to wait (`Retry-After`): about as long as its other streams take to end. */
const CLIENT_CAP_RETRY_SECONDS = 30

const PING = formatComment("ping")
const encodeCard = Schema.encodeSync(Card)

/** Why a stream ended: the reasons a `close` event gives, the client going away, or a reader too slow. */
type EndReason = CloseReason | "client" | "too-slow"

const closeMessages: Record<CloseReason, string> = {
  shutdown: "the server is shutting down: reconnect with Last-Event-ID",
  "signed-out": "the session was signed out",
  "session-expired": "the session expired: sign in again",
  replaced: "the user opened more streams than allowed: this, the oldest, is closed",
  "events-expired": "events after this stream's position are no longer kept: reconnect with Last-Event-ID",
  idle: "no event for a while: reconnect with Last-Event-ID"
}

interface OpenStream {
  readonly id: string
  readonly address: Address
  readonly sessionId: string
  readonly outbox: Outbox
  /** The id of the last event handed to the outbox. */
  cursor: number
  /** When the last event was handed to the outbox (ms): the stream is idle from then on. */
  lastEventAt: number
  /** The outbox refused an event: the stream goes on from the table once it drained. */
  behind: boolean
  /** The outbox's takes at the last heartbeat. */
  takesSeen: number
  kyc: KycState
  ending: EndReason | undefined
  sent: number
  readonly cut: () => void
  /** Bytes handed to the connection and not yet sent (the socket's own buffer). */
  readonly socketBytes: () => number
  readonly span: Tracer.Span
  /** Gives back the stream's slot in this replica's caps (once, whatever calls it). */
  readonly release: () => void
}

export class EventStreams extends Effect.Service<EventStreams>()("app/EventStreams", {
  scoped: Effect.gen(function* () {
    const repo = yield* EventRepo
    const kyc = yield* Kyc
    const standings = yield* Standing
    const cards = yield* Cards
    const chain = yield* ChainClient
    const pool = yield* DatabasePool
    const { chainTimeout } = yield* AppConfig
    const settings = yield* eventSettings
    const trustProxy = yield* trustProxySetting
    /** This replica, as the holder of its rows in `event_connections`. */
    const replica = randomUUID()
    /** Runs effects of this service from Node callbacks (a stream's body). */
    const runtime = yield* Effect.runtime<never>()
    const run = Runtime.runFork(runtime)
    const runPromise = Runtime.runPromise(runtime)

    const streams = new Map<string, OpenStream>()
    const byUser = new Map<string, Set<OpenStream>>()
    /** Users to read for, with the lowest id a notification announced (Infinity: a catch-up). */
    const dirty = new Map<string, number>()
    const wakeUp = yield* Effect.makeLatch(false)
    let shuttingDown = false
    /** This replica's slots taken (its streams, open or being opened), in all and per client address. */
    let admitted = 0
    const admittedPerClient = new Map<string, number>()

    /**
     * Takes a slot for a stream of `client`, or answers the cap that refuses it: checked and taken in one
     * step (no effect runs in between), so streams opened at once never pass a cap together.
     */
    const admit = (client: string): { readonly release: () => void } | "client" | "replica" => {
      if (admitted >= settings.maxStreams) return "replica"
      const held = admittedPerClient.get(client) ?? 0
      if (held >= settings.maxStreamsPerClient) return "client"
      admitted++
      admittedPerClient.set(client, held + 1)
      let released = false
      return {
        release: () => {
          if (released) return
          released = true
          admitted--
          const left = admittedPerClient.get(client)! - 1
          if (left === 0) admittedPerClient.delete(client)
          else admittedPerClient.set(client, left)
        }
      }
    }

    const markDirty = (address: string, notified = Number.POSITIVE_INFINITY) => {
      dirty.set(address, Math.min(dirty.get(address) ?? Number.POSITIVE_INFINITY, notified))
      wakeUp.unsafeOpen()
    }

    /** Ends a stream with a `close` event; one still open at the next heartbeat is cut. */
    const close = (stream: OpenStream, reason: CloseReason) => {
      if (stream.ending !== undefined) return
      stream.ending = reason
      stream.outbox.end(
        formatFrame({ event: "close", data: JSON.stringify({ reason, message: closeMessages[reason] }) })
      )
    }

    const cutOff = (stream: OpenStream, reason: EndReason) => {
      stream.ending ??= reason
      stream.cut()
    }

    // ---------------------------------------------------------------------------------------------
    // Reading and sending

    /** An event's frame; a `kyc` event gets the user's card, opened now (it is never stored in clear). */
    const render = (address: Address, event: StoredEvent) =>
      event.type !== "kyc"
        ? Effect.succeed(formatFrame({ event: event.type, id: String(event.id), data: event.data }))
        : renderKyc(address, event)

    const renderKyc = (address: Address, event: StoredEvent) =>
      Effect.gen(function* () {
        const { kyc: state } = JSON.parse(event.data) as { readonly kyc: KycState }
        const card = state === "approved" ? Option.getOrNull(yield* cards.forOwner(address)) : null
        return formatFrame({
          event: "kyc",
          id: String(event.id),
          data: JSON.stringify({ kyc: state, card: card === null ? null : encodeCard(card) })
        })
      })

    /**
     * Hands a user's events (ascending, read after `after`) to each of the user's streams at or past
     * `after` (one behind it was not read for: it is marked again when it needs to be).
     */
    const deliver = (
      address: Address,
      after: number,
      events: ReadonlyArray<StoredEvent>,
      sent: Map<string, number>,
      now: number
    ) =>
      Effect.gen(function* () {
        const users = byUser.get(address)
        if (users === undefined || events.length === 0) return
        const frames = new Map<number, string>()
        for (const stream of users) {
          if (stream.ending !== undefined || stream.cursor < after) continue
          const { gap, run: next } = nextRun(stream.cursor, events)
          for (const event of next) {
            let frame = frames.get(event.id)
            if (frame === undefined) {
              frame = yield* render(address, event)
              frames.set(event.id, frame)
            }
            if (!stream.outbox.offer(frame)) {
              stream.behind = true
              break
            }
            stream.cursor = event.id
            stream.lastEventAt = now
            stream.sent++
            if (event.type === "kyc") stream.kyc = (JSON.parse(event.data) as { kyc: KycState }).kyc
            sent.set(event.type, (sent.get(event.type) ?? 0) + 1)
          }
          // The next event is not stored any more (pruned while the stream caught up).
          if (gap && !stream.behind) close(stream, "events-expired")
        }
      })

    /** One read for the users marked, and the sending of what it found. */
    const dispatch = Effect.gen(function* () {
      const marked = [...dirty.entries()].slice(0, USERS_PER_READ)
      for (const [address] of marked) dirty.delete(address)
      const cursors = marked.flatMap(([address]) => {
        let lowest = Number.POSITIVE_INFINITY
        for (const stream of byUser.get(address) ?? []) {
          if (stream.ending === undefined && !stream.behind) lowest = Math.min(lowest, stream.cursor)
        }
        return Number.isFinite(lowest) ? [{ address, after: lowest }] : []
      })
      if (cursors.length === 0) return
      const events = yield* repo.after({ cursors, limit: PAGE }).pipe(
        Effect.tapErrorCause(() =>
          Effect.sync(() => {
            for (const [address, notified] of marked) markDirty(address, notified)
          })
        )
      )
      const byAddress = new Map<string, Array<StoredEvent>>()
      for (const event of events) {
        const list = byAddress.get(event.address)
        if (list === undefined) byAddress.set(event.address, [event])
        else list.push(event)
      }
      const sent = new Map<string, number>()
      const now = yield* Clock.currentTimeMillis
      const notifiedOf = new Map(marked)
      for (const { address, after } of cursors) {
        const found = byAddress.get(address) ?? []
        // A full page: there may be more.
        if (found.length === PAGE) markDirty(address)
        const notified = notifiedOf.get(address) ?? Number.POSITIVE_INFINITY
        yield* recordNotificationLag(found.filter((event) => event.id >= notified).map((event) => event.ageSeconds))
        yield* deliver(address as Address, after, found, sent, now)
      }
      for (const [type, count] of sent) yield* countEventsSent(type, count)
    })

    const dispatcher = Effect.gen(function* () {
      while (true) {
        yield* wakeUp.await
        yield* wakeUp.close
        if (dirty.size > USERS_PER_READ) wakeUp.unsafeOpen()
        yield* dispatch.pipe(
          Effect.catchAllCause((cause) =>
            Cause.isInterruptedOnly(cause)
              ? Effect.failCause(cause)
              : Option.match(outageOf(cause), {
                  onNone: () => Effect.logWarning("event streams: reading events failed; retrying", cause),
                  onSome: ({ dependency, reason }) =>
                    reportUnavailable(dependency, `event streams: ${reason}; retrying`, "job")
                }).pipe(Effect.zipRight(Effect.sleep(READ_RETRY)))
          )
        )
      }
    }).pipe(Effect.annotateLogs("job", "event-dispatcher"))
    yield* Effect.forkScoped(dispatcher)

    // ---------------------------------------------------------------------------------------------
    // Notifications

    const listener = yield* listen({
      connect: () => pool.dedicated("events"),
      channel: EVENTS_CHANNEL,
      onNotification: (payload) => {
        const [kind, first, second] = payload.split(" ")
        if (kind === "e" && first !== undefined) {
          const id = Number(second)
          for (const stream of byUser.get(first) ?? []) {
            if (stream.cursor < id) {
              markDirty(first, id)
              return
            }
          }
        } else if (kind === "c" && first !== undefined) {
          const stream = streams.get(first)
          if (stream !== undefined) close(stream, "replaced")
        }
      },
      onListening: Effect.sync(() => {
        for (const address of byUser.keys()) markDirty(address)
      })
    })

    // ---------------------------------------------------------------------------------------------
    // Heartbeat

    const heartbeat = Effect.gen(function* () {
      const idleSince = (yield* Clock.currentTimeMillis) - Duration.toMillis(settings.idleTimeout)
      for (const stream of streams.values()) {
        // Still open a heartbeat after its close: its writer is stuck.
        if (stream.ending !== undefined) {
          cutOff(stream, stream.ending)
        } else if (stream.outbox.pendingBytes > 0 && stream.outbox.takes === stream.takesSeen) {
          cutOff(stream, "too-slow")
        } else if (stream.lastEventAt <= idleSince) {
          close(stream, "idle")
        } else {
          stream.takesSeen = stream.outbox.takes
          stream.outbox.offer(PING)
        }
      }
      const open = [...streams.values()].filter((stream) => stream.ending === undefined)
      if (open.length === 0) return
      const sessions = yield* repo.liveSessions([...new Set(open.map((stream) => stream.sessionId))])
      for (const stream of open) {
        const session = sessions.get(stream.sessionId)
        if (session === undefined) close(stream, "signed-out")
        else if (session.expired) close(stream, "session-expired")
      }
      const newest = yield* repo.lastIds([...byUser.keys()])
      for (const { address, lastId } of newest) {
        for (const stream of byUser.get(address) ?? []) {
          if (stream.ending === undefined && stream.cursor < lastId) {
            markDirty(address)
            break
          }
        }
      }
      yield* repo.heartbeat(replica)
      yield* listener.check
      const pending = new Set(open.filter((stream) => stream.kyc === "pending").map((stream) => stream.address))
      yield* Effect.forEach(pending, (address) => kyc.reconcile(address), { concurrency: 8, discard: true })
    })
    // Alive from the start: the streams it registers are never taken for a dead replica's.
    yield* repo.heartbeat(replica)
    yield* forkLoop("event-heartbeat", {
      tick: heartbeat,
      every: settings.heartbeat,
      firstAfter: settings.heartbeat,
      release: repo.forgetReplica(replica)
    })

    // ---------------------------------------------------------------------------------------------
    // Opening a stream

    /** The card's USD1, or null when the chain does not answer in time. */
    const balanceOf = (address: Address) =>
      chain.balanceOf(chain.usd1.address, address).pipe(
        Effect.timeout(chainTimeout),
        Effect.map((atomic) => Number(formatUnits(atomic, chain.usd1.decimals))),
        Effect.orElseSucceed(() => null)
      )

    /**
     * Adds the stream to this replica (it starts reading from its position) and registers it for the
     * per-user limit, closing the user's oldest streams beyond it, wherever they are held.
     */
    const register = (stream: OpenStream) => {
      streams.set(stream.id, stream)
      const users = byUser.get(stream.address) ?? new Set()
      users.add(stream)
      byUser.set(stream.address, users)
      markDirty(stream.address)
      return runPromise(
        Effect.gen(function* () {
          yield* setOpenStreams(streams.size)
          const dropped = yield* repo.openStream({
            id: stream.id,
            address: stream.address,
            replica,
            max: settings.maxStreamsPerUser
          })
          for (const id of dropped) {
            const other = streams.get(id)
            if (other !== undefined) close(other, "replaced")
          }
        }).pipe(Effect.catchAllCause((cause) => Effect.logWarning("event stream: registering it failed", cause)))
      )
    }

    /** Removes the stream, then its registration (once written), and tells what ended it. */
    const unregister = (stream: OpenStream, registration: Promise<void>) => {
      stream.release()
      streams.delete(stream.id)
      const users = byUser.get(stream.address)
      users?.delete(stream)
      if (users?.size === 0) byUser.delete(stream.address)
      const reason: EndReason = stream.ending ?? "client"
      return run(
        Effect.gen(function* () {
          yield* setOpenStreams(streams.size)
          yield* countStreamClosed(reason)
          stream.span.attribute("events.sent", stream.sent)
          stream.span.attribute("events.close_reason", reason)
          stream.span.end(BigInt(Date.now()) * 1_000_000n, Exit.void)
          const line = `event stream closed (${reason})`
          yield* (reason === "too-slow" ? Effect.logWarning(line) : Effect.logInfo(line)).pipe(
            Effect.annotateLogs({
              "user.address": stream.address,
              "events.stream_id": stream.id,
              "events.sent": stream.sent,
              "events.position": stream.cursor
            })
          )
          yield* Effect.promise(() => registration)
          yield* repo.closeStream(stream.id).pipe(Effect.timeout("2 seconds"), Effect.ignore)
        })
      )
    }

    /**
     * The response body: a Node stream the HTTP server pipes into the connection (a plain stream,
     * not an Effect one: an open stream costs the service little memory while it waits). Each read
     * takes everything the outbox holds, waiting for some; the server reads again only once the
     * socket took the last write. The stream is added to this replica when first read (a response
     * never sent never is) and removed when closed: ended, cut, or the client gone.
     */
    const body = (stream: OpenStream) => {
      let registration: Promise<void> | undefined
      const readable = new Readable({
        read() {
          registration ??= register(stream)
          stream.outbox.whenReady(() => readable.push(stream.outbox.poll() ?? null))
        }
      })
      readable.once("close", () => {
        if (registration !== undefined) unregister(stream, registration)
        else stream.release()
      })
      return readable
    }

    /**
     * Opens the user's stream after `requested` (the client's Last-Event-ID; none: from now on). Refuses
     * before any byte is sent: 410 when the events after `requested` are gone or it is not an id of the
     * user, 429 when the client address holds its share of this replica, 503 while shutting down or full.
     */
    const open = traced("EventStreams.open")(function* (
      user: { readonly address: Address; readonly sessionId: string },
      requested: string | undefined,
      request: HttpServerRequest.HttpServerRequest
    ) {
      yield* Effect.annotateCurrentSpan("user.address", user.address)
      if (shuttingDown) return yield* new StreamsUnavailable({ error: "this replica is shutting down" })
      const slot = admit(clientOf(request, trustProxy))
      if (slot === "replica" || slot === "client") yield* countStreamRefused(slot)
      if (slot === "replica") {
        return yield* new StreamsUnavailable({ error: "this replica holds its maximum of event streams" })
      }
      if (slot === "client") {
        yield* answerRetryAfter(CLIENT_CAP_RETRY_SECONDS)
        return yield* new TooManyStreams({
          error: `this client address holds ${settings.maxStreamsPerClient} event streams here: close one, or retry later`
        })
      }
      return yield* opening(user, requested, request, slot.release).pipe(
        Effect.onExit((exit) => (Exit.isFailure(exit) ? Effect.sync(slot.release) : Effect.void))
      )
    })

    /** The rest of `open`, once the stream holds its slot (`release` gives it back). */
    const opening = (
      user: { readonly address: Address; readonly sessionId: string },
      requested: string | undefined,
      request: HttpServerRequest.HttpServerRequest,
      release: () => void
    ) =>
      Effect.gen(function* () {
        const requestedId = requested === undefined ? undefined : Number(requested)
        const position = yield* repo.position({ address: user.address, after: requestedId ?? 0 })
        const start = startPoint(requestedId, position.lastId, position.nextKept)
        if (start._tag === "Expired") {
          return yield* new EventIdExpired({
            error: `the events after ${requestedId} are no longer kept: re-read the resources, then connect without Last-Event-ID`
          })
        }
        if (start._tag === "Unknown") {
          return yield* new EventIdUnknown({
            error: `${requestedId} is not an id of this user's events (the newest is ${position.lastId}): re-read the resources, then connect without Last-Event-ID`
          })
        }
        // Read after the position: whatever changes meanwhile arrives as an event after it.
        const standing = yield* standings.of(user.address)
        const cardUsd1 = standing.card === null ? null : yield* balanceOf(user.address)
        const id = randomUUID()
        const response = (() => {
          try {
            return NodeHttpServerRequest.toServerResponse(request)
          } catch {
            return undefined
          }
        })()
        const span = yield* Effect.makeSpan("EventStream", {
          attributes: { "user.address": user.address, "events.stream_id": id, "events.after": start.after }
        })
        const stream: OpenStream = {
          id,
          address: user.address,
          sessionId: user.sessionId,
          outbox: new Outbox(settings.bufferBytes, () => {
            if (stream.behind) {
              stream.behind = false
              markDirty(stream.address)
            }
          }),
          cursor: start.after,
          lastEventAt: yield* Clock.currentTimeMillis,
          behind: false,
          takesSeen: -1,
          kyc: standing.kyc,
          ending: undefined,
          sent: 1,
          cut: () => response?.destroy(),
          socketBytes: () => response?.writableLength ?? 0,
          span,
          release
        }
        // However the connection ends, also before the body is read, the slot is free again.
        response?.once("close", release)
        stream.outbox.offer(
          formatFrame({
            retry: RECONNECT_MS,
            event: "ready",
            id: String(start.after),
            data: JSON.stringify({ kyc: standing.kyc, cardUsd1, lastEventId: position.lastId })
          })
        )
        yield* countEventsSent("ready", 1)
        yield* Effect.annotateCurrentSpan("events.stream_id", id)
        return HttpServerResponse.raw(body(stream), {
          contentType: "text/event-stream; charset=utf-8",
          // Proxies must pass each event on as it comes (nginx buffers unless told not to).
          headers: { "x-accel-buffering": "no" }
        })
      })

    /**
     * Shutdown: no new stream, every open one ends with `close` (shutdown), and what has not ended
     * after a short wait is cut, so that the server's own close is not held up by a stream.
     */
    const closeAll = Effect.gen(function* () {
      shuttingDown = true
      for (const stream of streams.values()) close(stream, "shutdown")
      const deadline = Date.now() + SHUTDOWN_WAIT_MS
      while (streams.size > 0 && Date.now() < deadline) yield* Effect.sleep("20 millis")
      for (const stream of streams.values()) cutOff(stream, "shutdown")
    })

    /** What tests and tools look at: each open stream's position and the bytes it holds. */
    const snapshot = Effect.sync(() =>
      [...streams.values()].map((stream) => ({
        id: stream.id,
        address: stream.address,
        position: stream.cursor,
        pendingBytes: stream.outbox.pendingBytes,
        socketBytes: stream.socketBytes(),
        capacity: stream.outbox.capacity
      }))
    )

    return { open, closeAll, snapshot, settings }
  }),
  dependencies: [EventRepo.Default]
}) {}
