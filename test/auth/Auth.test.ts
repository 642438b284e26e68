import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, TestClock } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { Account } from "../../src/account/Account.js"
import { Standing } from "../../src/account/Standing.js"
import { Auth, SESSION_TTL_MS } from "../../src/auth/Auth.js"
import { LocalCardIssuer } from "../../src/cards/CardIssuer.js"
import { Cards } from "../../src/cards/Cards.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Events, KycEventsLive } from "../../src/events/Events.js"
import { Kyc } from "../../src/kyc/Kyc.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { Secrets } from "../../src/runtime/Secrets.js"
import { sessionCount } from "../support/auth.js"
import { TestDatabase } from "../support/TestDatabase.js"

// The real services over the in-memory chain and the scripted identity provider.
const AuthTest = Account.Default.pipe(
  Layer.provideMerge(Auth.Default),
  Layer.provide(Standing.Default),
  Layer.provideMerge(Kyc.Default),
  Layer.provideMerge(KycEventsLive),
  Layer.provide([Cards.Default, Events.Default]),
  Layer.provide([InMemoryChain.layer(), ScriptedKycProvider.layer(), LocalCardIssuer, Secrets.ephemeral]),
  Layer.provideMerge(TestDatabase),
  Layer.provide(AppConfig.layer),
  Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map([["APP_URL", "https://app.example.com"]]))))
)

const NOW = Date.parse("2026-11-21T12:00:00Z")

const signedChallenge = Effect.gen(function* () {
  const auth = yield* Auth
  const account = privateKeyToAccount(generatePrivateKey())
  const { message } = yield* auth.challenge(account.address)
  const signature = yield* Effect.promise(() => account.signMessage({ message }))
  return { account, message, signature }
})

layer(AuthTest)("Auth under a test clock", (it) => {
  it.effect("a challenge used after its 10 minutes is CHALLENGE_EXPIRED and issues nothing", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const { message, signature } = yield* signedChallenge
      const before = yield* sessionCount
      yield* TestClock.adjust("10 minutes")
      const error = yield* Effect.flip(auth.verify(message, signature))
      expect(error._tag).toBe("ChallengeExpired")
      expect(yield* sessionCount).toBe(before)
    })
  )

  it.effect("a challenge used just inside its lifetime signs in", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const { account, message, signature } = yield* signedChallenge
      yield* TestClock.adjust("9 minutes")
      const result = yield* auth.verify(message, signature)
      expect(result.address).toBe(account.address)
    })
  )

  it.effect("the first sign-in creates the user with its session; later ones only add a session", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const first = yield* signedChallenge
      expect(yield* auth.verify(first.message, first.signature)).toMatchObject({
        address: first.account.address,
        created: true
      })
      const { message } = yield* auth.challenge(first.account.address)
      const signature = yield* Effect.promise(() => first.account.signMessage({ message }))
      expect(yield* auth.verify(message, signature)).toMatchObject({ created: false })
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ users: number; sessions: number; used: number }>`
        SELECT (SELECT count(*)::int FROM users WHERE address = ${first.account.address}) AS users,
               (SELECT count(*)::int FROM sessions WHERE address = ${first.account.address}) AS sessions,
               (SELECT count(*)::int FROM auth_challenges WHERE address = ${first.account.address}
                  AND used_at IS NOT NULL) AS used`
      expect(rows).toEqual([{ users: 1, sessions: 2, used: 2 }])
    })
  )

  it.effect("an expired challenge creates no user and stays unused", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const { account, message, signature } = yield* signedChallenge
      yield* TestClock.adjust("10 minutes")
      expect((yield* Effect.flip(auth.verify(message, signature)))._tag).toBe("ChallengeExpired")
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ users: number; unused: number }>`
        SELECT (SELECT count(*)::int FROM users WHERE address = ${account.address}) AS users,
               (SELECT count(*)::int FROM auth_challenges WHERE address = ${account.address}
                  AND used_at IS NULL) AS unused`
      expect(rows).toEqual([{ users: 0, unused: 1 }])
    })
  )

  it.effect("a token is refused from the expiresAt its sign-in answered, 30 days on", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const { account, message, signature } = yield* signedChallenge
      const { expiresAt, token } = yield* auth.verify(message, signature)
      expect(expiresAt).toBe(NOW + SESSION_TTL_MS)
      yield* TestClock.setTime(expiresAt - 1)
      expect((yield* auth.authenticate(token)).address).toBe(account.address)
      yield* TestClock.setTime(expiresAt)
      const error = yield* Effect.flip(auth.authenticate(token))
      expect(error._tag).toBe("Unauthorized")
    })
  )

  it.effect("signing out revokes only that session", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const first = yield* signedChallenge
      const { token: tokenA } = yield* auth.verify(first.message, first.signature)
      const { message, signature } = yield* Effect.gen(function* () {
        const { message } = yield* auth.challenge(first.account.address)
        return { message, signature: yield* Effect.promise(() => first.account.signMessage({ message })) }
      })
      const { token: tokenB } = yield* auth.verify(message, signature)
      const sessionA = yield* auth.authenticate(tokenA)
      yield* (yield* Account).signOut(sessionA.sessionId)
      expect((yield* Effect.flip(auth.authenticate(tokenA)))._tag).toBe("Unauthorized")
      expect((yield* auth.authenticate(tokenB)).address).toBe(first.account.address)
    })
  )
})
