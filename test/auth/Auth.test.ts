import { expect, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, TestClock } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { Account } from "../../src/account/Account.js"
import { Auth, SESSION_TTL_MS } from "../../src/auth/Auth.js"
import { AppConfig } from "../../src/Config.js"
import { LocalCardIssuer } from "../../src/cards/CardIssuer.js"
import { Cards } from "../../src/cards/Cards.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { Kyc } from "../../src/kyc/Kyc.js"
import { ScriptedKycProvider } from "../../src/kyc/ScriptedKycProvider.js"
import { Secrets } from "../../src/Secrets.js"
import { sessionCount } from "../support/auth.js"
import { TestDatabase } from "../support/TestDatabase.js"

// The real services over the in-memory chain and the scripted identity provider.
const AuthTest = Account.Default.pipe(
  Layer.provideMerge(Auth.Default),
  Layer.provide(Kyc.Default),
  Layer.provide(Cards.Default),
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

  it.effect("a token is refused once it is 30 days old", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(NOW)
      const auth = yield* Auth
      const { account, message, signature } = yield* signedChallenge
      const { token } = yield* auth.verify(message, signature)
      yield* TestClock.setTime(NOW + SESSION_TTL_MS - 1)
      expect((yield* auth.authenticate(token)).address).toBe(account.address)
      yield* TestClock.setTime(NOW + SESSION_TTL_MS)
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
