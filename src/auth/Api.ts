import { HttpApiEndpoint, HttpApiGroup, HttpApiMiddleware, HttpApiSecurity, OpenApi } from "@effect/platform"
import { Context, Schema } from "effect"
import { Card } from "../cards/Card.js"
import { Address } from "../chain/Address.js"
import { ApiError, ChainUnavailable, RateLimited, Unauthorized } from "../http/ApiError.js"
import { KycState } from "../kyc/KycState.js"

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
  { readonly address: Address; readonly sessionId: string }
>() {}

export class Authentication extends HttpApiMiddleware.Tag<Authentication>()("app/Authentication", {
  failure: Unauthorized.wire,
  provides: CurrentUser,
  security: { bearer: HttpApiSecurity.bearer }
}) {}

export const Hex = Schema.String.pipe(
  Schema.pattern(/^0x[0-9a-fA-F]*$/, { message: () => "must be a 0x-prefixed hex string" }),
  Schema.maxLength(100_000)
)

export class SignInResult extends Schema.Class<SignInResult>("SignInResult")({
  token: Schema.String.annotations({ description: "Bearer token, valid 30 days" }),
  address: Address,
  kyc: KycState,
  card: Schema.NullOr(Card)
}) {}

export class AuthApi extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("challenge", "/auth/challenge")
      .setPayload(Schema.Struct({ address: Address }))
      .addSuccess(Schema.Struct({ message: Schema.String }))
      .addError(RateLimited.wire)
      .annotate(OpenApi.Summary, "Get a sign-in challenge")
      .annotate(
        OpenApi.Description,
        "An EIP-4361 (Sign-In with Ethereum) message for the address to sign; single use, valid 10 minutes. " +
          "Rate limited per client (RATE_LIMIT_SIGNIN a minute, shared with /auth/verify)."
      )
  )
  .add(
    HttpApiEndpoint.post("verify", "/auth/verify")
      .setPayload(
        Schema.Struct({ message: Schema.String.pipe(Schema.maxLength(4096)), signature: Hex.pipe(Schema.minLength(4)) })
      )
      .addSuccess(SignInResult)
      .addError(InvalidSignature.wire)
      .addError(ChallengeExpired.wire)
      .addError(ChallengeUnknown.wire)
      .addError(RateLimited.wire)
      .addError(ChainUnavailable.wire)
      .annotate(OpenApi.Summary, "Sign in with a signed challenge")
      .annotate(
        OpenApi.Description,
        "Exchanges the signed challenge for a 30-day bearer token, with the account's identity-check state and " +
          "card. The signature may be an EOA's, a deployed smart account's (ERC-1271, checked on chain) or an " +
          "ERC-6492 signature of a smart account not deployed yet (checked in simulation; nothing is deployed)."
      )
  )
  .annotate(OpenApi.Title, "Sign-in")
  .annotate(
    OpenApi.Description,
    "Wallet sign-in: ask for a challenge, sign it with the wallet, exchange it for a bearer token. The token " +
      "goes in `Authorization: Bearer <token>` on the endpoints that need it."
  ) {}
