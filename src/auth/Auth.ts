/**
 * Sign-in with a wallet key: SIWE challenges, signature checks and opaque bearer sessions.
 * Challenges are stored and single use; tokens are 32 random bytes kept only as SHA-256. Expired
 * challenges and sessions are deleted by the retention job (Retention.ts).
 * The challenge's chain id is the chain's own (from the `ChainClient` port).
 */
import { createHash, randomBytes } from "node:crypto"
import { Clock, Effect, Option } from "effect"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/ChainClient.js"
import { ChainUnavailable, Unauthorized } from "../http/ApiError.js"
import { traced } from "../observability/Traced.js"
import { AppConfig } from "../runtime/Config.js"
import { ChallengeExpired, ChallengeUnknown, InvalidSignature } from "./Api.js"
import { AuthRepo } from "./AuthRepo.js"
import { buildChallenge, challengeOf, signedByKey } from "./Siwe.js"

export const SESSION_TTL_MS = 30 * 24 * 60 * 60 * 1000

/** Session ids are the SHA-256 of their token: a leaked table holds no usable token. */
const sha256 = (token: string): Uint8Array => createHash("sha256").update(token, "utf8").digest()

export class Auth extends Effect.Service<Auth>()("app/Auth", {
  effect: Effect.gen(function* () {
    const repo = yield* AuthRepo
    const chain = yield* ChainClient
    const { appUrl, chainTimeout } = yield* AppConfig
    const site = { appUrl, chainId: chain.chainId }

    const challenge = traced("Auth.challenge")(function* (address: Address) {
      const now = yield* Clock.currentTimeMillis
      const issued = buildChallenge(site, address, randomBytes(16).toString("hex"), now)
      yield* repo.insertChallenge({
        nonce: issued.nonce,
        address,
        message: issued.message,
        issuedAt: new Date(issued.issuedAt),
        expiresAt: new Date(issued.expiresAt)
      })
      return { message: issued.message }
    })

    const unknown = () => new ChallengeUnknown({ error: "the message is not a challenge issued by this server" })
    const used = () => new ChallengeUnknown({ error: "the challenge was already used" })

    /** Why the challenge of `message` cannot be used now; a read made only on that failure path. */
    const unusable = traced("Auth.unusable")(function* (nonce: string, message: string, now: number) {
      const stored = yield* repo.findChallenge(nonce)
      if (Option.isNone(stored) || stored.value.message !== message) return unknown()
      if (stored.value.usedAt !== null) return used()
      if (now >= stored.value.expiresAt.getTime()) {
        return new ChallengeExpired({ error: "the challenge expired; request a new one" })
      }
      return undefined
    })

    /** A contract wallet's signature is checked on chain: bounded, and 503 when the chain does not answer. */
    const signedOnChain = (address: Address, message: string, signature: `0x${string}`) =>
      chain.verifyMessage(address, message, signature).pipe(
        Effect.timeoutFail({ duration: chainTimeout, onTimeout: () => "timeout" as const }),
        Effect.catchAll((cause) =>
          // counted in the chain's outage from the 503 (Outages.ts); the detail at debug level
          Effect.logDebug("sign-in: the chain did not answer", cause).pipe(
            Effect.zipRight(new ChainUnavailable({ error: "the chain did not answer in time; try again" }))
          )
        )
      )

    /**
     * Exchanges a signed challenge for a new session: the bearer token, when it expires (ms since
     * epoch), whose it is, and whether this sign-in created the user. An EOA's signature is recovered here, so the common sign-in is one
     * statement; any other signature reaches the chain only for a challenge that is still usable.
     */
    const verify = traced("Auth.verify")(function* (message: string, signature: `0x${string}`) {
      const parsed = challengeOf(message)
      if (parsed === undefined) return yield* unknown()
      const { nonce, address } = parsed
      const now = yield* Clock.currentTimeMillis
      if (!(yield* Effect.promise(() => signedByKey(address, message, signature)))) {
        const refusal = yield* unusable(nonce, message, now)
        if (refusal !== undefined) return yield* refusal
        if (!(yield* signedOnChain(address, message, signature))) {
          return yield* new InvalidSignature({ error: `the signature is not from ${address}` })
        }
      }
      const token = randomBytes(32).toString("base64url")
      const expiresAt = now + SESSION_TTL_MS
      const session = yield* repo.signIn({
        nonce,
        message,
        tokenHash: sha256(token),
        now: new Date(now),
        expiresAt: new Date(expiresAt)
      })
      if (Option.isNone(session)) return yield* (yield* unusable(nonce, message, now)) ?? used()
      yield* Effect.annotateCurrentSpan("user.address", session.value.address)
      return { token, expiresAt, address: session.value.address, created: session.value.created }
    })

    const authenticate = traced("Auth.authenticate")(function* (token: string) {
      // Made only when refused: an error's construction (schema check, stack) is not free.
      const invalid = () => new Unauthorized({ error: "the bearer token is missing, invalid, expired or revoked" })
      if (!/^[A-Za-z0-9_-]{43}$/.test(token)) return yield* invalid()
      const tokenHash = sha256(token)
      const session = yield* repo.findSession(tokenHash)
      const now = yield* Clock.currentTimeMillis
      if (Option.isNone(session) || session.value.expiresAt.getTime() <= now) return yield* invalid()
      yield* Effect.annotateCurrentSpan("user.address", session.value.address)
      return {
        address: session.value.address,
        sessionId: Buffer.from(tokenHash).toString("hex"),
        userCreatedAt: session.value.userCreatedAt
      }
    })

    /** Revokes one session (by its id, as `authenticate` gives it); the user's other sessions stay. */
    const signOut = (sessionId: string) => repo.deleteSession(Buffer.from(sessionId, "hex"))

    return { challenge, verify, authenticate, signOut }
  }),
  dependencies: [AuthRepo.Default]
}) {}
