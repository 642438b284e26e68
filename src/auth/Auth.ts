/**
 * Sign-in with a wallet key: SIWE challenges, signature checks and opaque bearer sessions.
 * Challenges are stored and single use; tokens are 32 random bytes kept only as SHA-256.
 * The challenge's chain id is the chain's own (from the `ChainClient` port).
 */
import { createHash, randomBytes } from "node:crypto"
import { Clock, Effect, Option } from "effect"
import { ChainUnavailable, Unauthorized } from "../ApiError.js"
import { AppConfig } from "../Config.js"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { ChallengeExpired, ChallengeUnknown, InvalidSignature } from "./Api.js"
import { AuthRepo } from "./AuthRepo.js"
import { buildChallenge, nonceOf } from "./Siwe.js"

export const SESSION_TTL_MS = 30 * 24 * 60 * 60 * 1000
const CHALLENGE_RETENTION_MS = 24 * 60 * 60 * 1000

/** Session ids are the SHA-256 of their token: a leaked table holds no usable token. */
const sha256 = (token: string): Uint8Array => createHash("sha256").update(token, "utf8").digest()

export class Auth extends Effect.Service<Auth>()("app/Auth", {
  effect: Effect.gen(function* () {
    const repo = yield* AuthRepo
    const chain = yield* ChainClient
    const { appUrl, chainTimeout } = yield* AppConfig
    const site = { appUrl, chainId: chain.chainId }

    const challenge = Effect.fn("Auth.challenge")(function* (address: Address) {
      const now = yield* Clock.currentTimeMillis
      const issued = buildChallenge(site, address, randomBytes(16).toString("hex"), now)
      yield* repo.pruneChallenges(new Date(now - CHALLENGE_RETENTION_MS))
      yield* repo.insertChallenge({
        nonce: issued.nonce,
        address,
        message: issued.message,
        issuedAt: new Date(issued.issuedAt),
        expiresAt: new Date(issued.expiresAt)
      })
      return { message: issued.message }
    })

    /** Exchanges a signed challenge for a new session: the bearer token and whose it is. */
    const verify = Effect.fn("Auth.verify")(function* (message: string, signature: `0x${string}`) {
      const unknown = new ChallengeUnknown({ error: "the message is not a challenge issued by this server" })
      const nonce = nonceOf(message)
      if (nonce === undefined) return yield* unknown
      const stored = yield* repo.findChallenge(nonce)
      if (Option.isNone(stored) || stored.value.message !== message) return yield* unknown
      const issued = stored.value
      if (issued.usedAt !== null) return yield* new ChallengeUnknown({ error: "the challenge was already used" })
      const now = yield* Clock.currentTimeMillis
      if (now >= issued.expiresAt.getTime()) {
        return yield* new ChallengeExpired({ error: "the challenge expired; request a new one" })
      }
      // A contract wallet's signature is checked on chain: bounded, and 503 when the chain does not answer.
      const signed = yield* chain.verifyMessage(issued.address, message, signature).pipe(
        Effect.timeoutFail({ duration: chainTimeout, onTimeout: () => "timeout" as const }),
        Effect.catchAll((cause) =>
          Effect.logWarning("sign-in: the chain did not answer", cause).pipe(
            Effect.zipRight(new ChainUnavailable({ error: "the chain did not answer in time; try again" }))
          )
        )
      )
      if (!signed) {
        return yield* new InvalidSignature({ error: `the signature is not from ${issued.address}` })
      }
      const token = randomBytes(32).toString("base64url")
      yield* Effect.gen(function* () {
        // Consuming is the atomic gate: of concurrent verifications only one gets a session.
        if (!(yield* repo.consumeChallenge(nonce, new Date(now)))) {
          return yield* new ChallengeUnknown({ error: "the challenge was already used" })
        }
        yield* repo.upsertUser({ address: issued.address, createdAt: new Date(now) })
        yield* repo.insertSession({
          tokenHash: sha256(token),
          address: issued.address,
          createdAt: new Date(now),
          expiresAt: new Date(now + SESSION_TTL_MS)
        })
      }).pipe(repo.withTransaction)
      yield* Effect.annotateCurrentSpan("user.address", issued.address)
      return { token, address: issued.address }
    })

    const authenticate = Effect.fn("Auth.authenticate")(function* (token: string) {
      const invalid = new Unauthorized({ error: "the bearer token is missing, invalid, expired or revoked" })
      if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return yield* invalid
      const tokenHash = sha256(token)
      const session = yield* repo.findSession(tokenHash)
      const now = yield* Clock.currentTimeMillis
      if (Option.isNone(session) || session.value.expiresAt.getTime() <= now) return yield* invalid
      yield* Effect.annotateCurrentSpan("user.address", session.value.address)
      return { address: session.value.address, sessionId: Buffer.from(tokenHash).toString("hex") }
    })

    return { challenge, verify, authenticate }
  }),
  dependencies: [AuthRepo.Default]
}) {}
