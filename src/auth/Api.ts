import { HttpApiMiddleware, HttpApiSecurity } from "@effect/platform"
import { Context } from "effect"
import type { Address } from "../chain/Address.js"
import { ApiError, Unauthorized } from "../http/ApiError.js"

export class InvalidSignature extends ApiError(
  "InvalidSignature",
  "INVALID_SIGNATURE",
  401,
  "The signature does not recover the challenge's address."
) {}

export class ChallengeExpired extends ApiError(
  "ChallengeExpired",
  "CHALLENGE_EXPIRED",
  401,
  "The challenge is older than its 10-minute lifetime; ask for a new one."
) {}

export class ChallengeUnknown extends ApiError(
  "ChallengeUnknown",
  "CHALLENGE_UNKNOWN",
  401,
  "The message is not a challenge this server issued, or it was already used."
) {}

/** The signed-in user, provided to bearer endpoints by the `Authentication` middleware. */
export class CurrentUser extends Context.Tag("app/CurrentUser")<
  CurrentUser,
  {
    readonly address: Address
    readonly sessionId: string
    /** The user's first sign-in, read with the session. */
    readonly userCreatedAt: Date
  }
>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("app/Authentication", {
  failure: Unauthorized.wire,
  provides: CurrentUser,
  security: { bearer: HttpApiSecurity.bearer }
}) {}
