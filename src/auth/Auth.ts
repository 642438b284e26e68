/**
 * Sign-in with a wallet key: SIWE challenges, signature checks and opaque bearer sessions.
 * Challenges are stored and single use; tokens are 32 random bytes kept only as SHA-256.
 */
import { createHash, randomBytes } from "node:crypto"
import { Clock, Config, Effect, Option } from "effect"
import { verifyMessage } from "viem"
import { Unauthorized } from "../ApiError.js"
import { AppConfig } from "../Config.js"
import type { Address } from "../chain/Address.js"
import { ChainClient } from "../chain/Chain.js"
import { Kyc } from "../kyc/Kyc.js"
import { ChallengeExpired, ChallengeUnknown, InvalidSignature, Me, SignInResult } from "./Api.js"
import { AuthRepo } from "./AuthRepo.js"
import { buildChallenge, nonceOf } from "./Siwe.js"

export const SESSION_TTL_MS = 30 * 24 * 60 * 60 * 1000
const CHALLENGE_RETENTION_MS = 24 * 60 * 60 * 1000

const sha256 = (token: string): Uint8Array => createHash("sha256").update(token, "utf8").digest()

export class Auth extends Effect.Service<Auth>()("app/Auth", {
  effect: Effect.gen(function* () {
    const repo = yield* AuthRepo
    const kyc = yield* Kyc
    const { appUrl } = yield* AppConfig
    const chainId = yield* Config.integer("CHAIN_ID").pipe(Config.withDefault(31337))
    const chain = yield* ChainClient

    /**
     * An EOA signature recovers locally; otherwise the chain is asked (ERC-1271 contract wallets,
     * ERC-6492 for wallets not deployed yet). A malformed signature is simply "not signed".
     */
    const isSignedBy = (address: Address, message: string, signature: `0x${string}`) =>
      Effect.promise(async () => {
        if (await verifyMessage({ address, message, signature }).catch(() => false)) return true
        return chain.publicClient.verifyMessage({ address, message, signature }).catch(() => false)
      })

    const challenge = Effect.fn("Auth.challenge")(function* (address: Address) {
      const now = yield* Clock.currentTimeMillis
      const issued = buildChallenge({ appUrl, chainId }, address, randomBytes(16).toString("hex"), now)
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

    const profile = Effect.fn("Auth.profile")(function* (address: Address) {
      const user = yield* repo.findUser(address).pipe(Effect.flatMap(Effect.orDieWith(() => "user row missing")))
      // The identity-check state and card, reconciled with the provider when a check is pending.
      const { kyc: state, card } = yield* kyc.standing(address)
      return new Me({ address: user.address, kyc: state, card, createdAt: user.createdAt.getTime() })
    })

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
      if (!(yield* isSignedBy(issued.address, message, signature))) {
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
      const me = yield* profile(issued.address)
      return new SignInResult({ token, address: me.address, kyc: me.kyc, card: me.card })
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

    const signout = Effect.fn("Auth.signout")(function* (sessionId: string) {
      yield* repo.deleteSession(Buffer.from(sessionId, "hex"))
    })

    return { challenge, verify, authenticate, signout, profile }
  }),
  dependencies: [AuthRepo.Default, Kyc.Default]
}) {}
