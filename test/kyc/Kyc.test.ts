/**
 * The Kyc service (and a user's standing, which polls it) under a test clock with a counting fake
 * provider: the reconciliation window (kept in the database), provider failures and timeouts, and
 * abandoned sessions.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Deferred, Effect, Fiber, Layer, Option, Redacted, TestClock } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { Standing } from "../../src/account/Standing.js"
import { LocalCardIssuer } from "../../src/cards/CardIssuer.js"
import { Cards } from "../../src/cards/Cards.js"
import { Events, KycEventsLive } from "../../src/events/Events.js"
import { KycProviderFailed } from "../../src/kyc/Api.js"
import { Kyc, RECONCILE_INTERVAL_MS } from "../../src/kyc/Kyc.js"
import { KycProvider, type SessionReport } from "../../src/kyc/KycProvider.js"
import { KycRepo } from "../../src/kyc/KycRepo.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { Secrets } from "../../src/runtime/Secrets.js"
import { TestDatabase } from "../support/TestDatabase.js"
import { CARD_KEY_HEX } from "./helpers.js"

/** What the fake provider says about each session, and how often it was asked. */
const provider = {
  reports: new Map<string, SessionReport | "fail">(),
  getCalls: new Map<string, number>(),
  created: 0,
  /** When set, createSession signals it was called and then never answers. */
  hang: undefined as Deferred.Deferred<void> | undefined
}

const FakeProvider = Layer.succeed(
  KycProvider,
  KycProvider.of({
    name: "didit",
    createSession: () =>
      provider.hang !== undefined
        ? Effect.zipRight(Deferred.succeed(provider.hang, undefined), Effect.never)
        : Effect.sync(() => {
            provider.created++
            const sessionId = `fake-${provider.created}-${Math.random().toString(36).slice(2)}`
            provider.reports.set(sessionId, { status: "pending", document: Option.none() })
            return { sessionId, url: `https://provider.test/${sessionId}` }
          }),
    getSession: (sessionId) =>
      Effect.suspend(() => {
        provider.getCalls.set(sessionId, (provider.getCalls.get(sessionId) ?? 0) + 1)
        const report = provider.reports.get(sessionId)
        return report === undefined || report === "fail"
          ? Effect.fail(new KycProviderFailed({ error: "fake provider down" }))
          : Effect.succeed(report)
      }),
    verifyWebhook: () => Effect.die("not used here")
  })
)

const KycTest = Standing.Default.pipe(
  Layer.provideMerge(Kyc.DefaultWithoutDependencies),
  Layer.provideMerge(KycEventsLive),
  Layer.provideMerge(Layer.mergeAll(KycRepo.Default, Cards.Default, Events.Default, FakeProvider)),
  Layer.provide([LocalCardIssuer, Secrets.layer]),
  Layer.provideMerge(TestDatabase),
  Layer.provide(AppConfig.layer),
  Layer.provide(
    Layer.setConfigProvider(
      ConfigProvider.fromMap(
        new Map([
          ["APP_URL", "https://app.example.com"],
          ["CARD_DATA_KEY", CARD_KEY_HEX]
        ])
      )
    )
  )
)

const NOW = Date.parse("2026-11-21T12:00:00Z")

/** A user row, as sign-in would create it. */
const newUser = Effect.gen(function* () {
  const address = privateKeyToAccount(generatePrivateKey()).address
  const sql = yield* SqlClient.SqlClient
  yield* sql`INSERT INTO users (address, created_at) VALUES (${address}, ${new Date(NOW)})`.pipe(Effect.orDie)
  return address
})

const sessionOf = (url: string) => url.replace("https://provider.test/", "")

/** The services, with the test clock at NOW. */
const atNow = Effect.gen(function* () {
  yield* TestClock.setTime(NOW)
  return { kyc: yield* Kyc, standing: yield* Standing }
})

/** At NOW, a new user who has started the identity check: `id` is the provider's session. */
const userInCheck = Effect.gen(function* () {
  const { kyc, standing } = yield* atNow
  const user = yield* newUser
  const id = sessionOf((yield* kyc.startSession(user, undefined)).url)
  return { kyc, standing, user, id }
})

/**
 * Runs `effect` in a transaction of its own and says whether it wrote anything: PostgreSQL gives a
 * transaction an id at its first write (a row changed or locked), never for reads.
 */
const wrote = <A, E, R>(effect: Effect.Effect<A, E, R>) =>
  Effect.gen(function* () {
    const sql = yield* SqlClient.SqlClient
    const [row] = yield* sql.withTransaction(
      Effect.zipRight(effect, sql<{ xid: string | null }>`SELECT pg_current_xact_id_if_assigned()::text AS xid`)
    )
    return row?.xid != null
  }).pipe(Effect.orDie)

layer(KycTest)("Kyc under a test clock", (it) => {
  it.effect("polls ask the provider at most once per window per user, whatever the concurrency", () =>
    Effect.gen(function* () {
      const { standing, user: alice, id: a } = yield* userInCheck
      const { user: bob, id: b } = yield* userInCheck
      const calls = (id: string) => provider.getCalls.get(id) ?? 0

      yield* Effect.all(
        Array.from({ length: 10 }, (_, i) => standing.of(i % 2 === 0 ? alice : bob)),
        { concurrency: "unbounded" }
      )
      expect([calls(a), calls(b)]).toEqual([1, 1])

      yield* TestClock.adjust(RECONCILE_INTERVAL_MS - 1)
      yield* standing.of(alice)
      expect(calls(a)).toBe(1)

      yield* TestClock.adjust(1)
      yield* Effect.all([standing.of(alice), standing.of(alice), standing.of(alice)], { concurrency: "unbounded" })
      expect(calls(a)).toBe(2)
      expect(calls(b)).toBe(1)
    })
  )

  it.effect("a poll with nothing due writes nothing; only a pending check's due look writes its claim", () =>
    Effect.gen(function* () {
      const { standing, user: pending, id } = yield* userInCheck
      const { user: declined, id: declinedId } = yield* userInCheck
      const none = yield* newUser
      const document = { fullName: "Mary Jackson", documentNumber: Redacted.make("MJ-1921") }
      provider.reports.set(declinedId, { status: "declined", document: Option.none() })

      expect(yield* wrote(standing.of(none))).toBe(false)
      // First polls: each pending check is due a look, claimed (and the decline applied).
      expect(yield* wrote(standing.of(pending))).toBe(true)
      expect(yield* wrote(standing.of(declined))).toBe(true)
      // Inside the window, and for a final state, a poll is a read.
      expect(yield* wrote(standing.of(pending))).toBe(false)
      expect(yield* wrote(standing.of(declined))).toBe(false)
      expect((yield* standing.of(declined)).kyc).toBe("declined")

      provider.reports.set(id, { status: "approved", document: Option.some(document) })
      yield* TestClock.adjust(RECONCILE_INTERVAL_MS)
      expect(yield* wrote(standing.of(pending))).toBe(true)
      yield* TestClock.adjust(RECONCILE_INTERVAL_MS)
      expect(yield* wrote(standing.of(pending))).toBe(false)
      expect(yield* wrote(standing.of(declined))).toBe(false)
      expect((yield* standing.of(pending)).card?.holder).toBe("Mary Jackson")
      expect([provider.getCalls.get(id), provider.getCalls.get(declinedId)]).toEqual([2, 1])
    })
  )

  it.effect("a reconciled approval issues the card; nothing is asked once the check is final", () =>
    Effect.gen(function* () {
      const { standing, user, id } = yield* userInCheck
      provider.reports.set(id, {
        status: "approved",
        document: Option.some({ fullName: "Evelyn Boyd Granville", documentNumber: Redacted.make("EBG-1924") })
      })
      const found = yield* standing.of(user)
      expect(found.kyc).toBe("approved")
      expect(found.card?.holder).toBe("Evelyn Boyd Granville")
      expect(found.card?.createdAt).toBe(NOW)
      yield* TestClock.adjust("1 minute")
      yield* standing.of(user)
      expect(provider.getCalls.get(id)).toBe(1)
    })
  )

  it.effect("a provider failure while polling is logged, not an error; the state stays", () =>
    Effect.gen(function* () {
      const { standing, user, id } = yield* userInCheck
      provider.reports.set(id, "fail")
      expect((yield* standing.of(user)).kyc).toBe("pending")
      expect(provider.getCalls.get(id)).toBe(1)
    })
  )

  it.effect("an approval without a verified document is not applied", () =>
    Effect.gen(function* () {
      const { standing, user, id } = yield* userInCheck
      provider.reports.set(id, { status: "approved", document: Option.none() })
      expect(yield* standing.of(user)).toEqual({ kyc: "pending", card: null, owedUsd: 0 })
    })
  )

  it.effect("a session abandoned at the provider is noticed when starting again: a new one opens", () =>
    Effect.gen(function* () {
      const { kyc, standing } = yield* atNow
      const user = yield* newUser
      const first = (yield* kyc.startSession(user, undefined)).url
      expect((yield* kyc.startSession(user, undefined)).url).toBe(first)
      provider.reports.set(sessionOf(first), { status: "expired", document: Option.none() })
      yield* TestClock.adjust(RECONCILE_INTERVAL_MS)
      const second = (yield* kyc.startSession(user, undefined)).url
      expect(second).not.toBe(first)
      expect((yield* standing.of(user)).kyc).toBe("pending")
    })
  )

  it.effect("a provider that does not answer in 10 seconds is KycProviderFailed, and nothing is stored", () =>
    Effect.gen(function* () {
      const { kyc, standing } = yield* atNow
      const user = yield* newUser
      const called = yield* Deferred.make<void>()
      provider.hang = called
      const fiber = yield* Effect.fork(kyc.startSession(user, undefined))
      // Only once the provider is being waited on (after real database work) does time move.
      yield* Deferred.await(called)
      yield* TestClock.adjust("9999 millis")
      expect(fiber.unsafePoll()).toBeNull()
      yield* TestClock.adjust("1 millis")
      const error = yield* Effect.flip(Fiber.join(fiber))
      provider.hang = undefined
      expect(error._tag).toBe("KycProviderFailed")
      expect(yield* standing.of(user)).toEqual({ kyc: "none", card: null, owedUsd: 0 })
    })
  )
})
