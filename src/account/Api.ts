/**
 * The user's account over HTTP: signing in (the `auth` group, whose result says where the user stands)
 * and, signed in, `GET /me` and sign-out. How a wallet signs in and a session is checked is auth/'s.
 */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication, ChallengeExpired, ChallengeUnknown, InvalidSignature } from "../auth/Api.js"
import { Card } from "../cards/Card.js"
import { Address } from "../chain/Address.js"
import { ChainUnavailable, RateLimited } from "../http/ApiError.js"
import { withFieldMessages } from "../http/FieldMessages.js"
import { KycState } from "../kyc/KycState.js"

export class Me extends Schema.Class<Me>("Me")({
  address: Address,
  kyc: KycState,
  card: Schema.NullOr(Card),
  owedUsd: Schema.Number.annotations({
    description:
      "what the card owes the card program: clearings that could not be debited from the card wallet (the card is " +
      "frozen, amount_owed, until the agent's refill repays them); 0 without a card"
  }),
  createdAt: Schema.Number.annotations({ description: "ms since epoch" })
}) {}

const Hex = Schema.String.pipe(
  Schema.pattern(/^0x[0-9a-fA-F]*$/, { message: () => "must be a 0x-prefixed hex string" }),
  Schema.maxLength(100_000)
)

export class SignInResult extends Schema.Class<SignInResult>("SignInResult")({
  token: Schema.String.annotations({ description: "Bearer token, valid 30 days" }),
  expiresAt: Schema.Number.annotations({
    description: "when the token stops working, ms since epoch (30 days after the sign-in); sign in again then"
  }),
  address: Address,
  kyc: KycState,
  card: Schema.NullOr(Card)
}) {}

export class SignInApi extends HttpApiGroup.make("auth")
  .add(
    HttpApiEndpoint.post("challenge", "/auth/challenge")
      .setPayload(withFieldMessages(Schema.Struct({ address: Address })))
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
        withFieldMessages(
          Schema.Struct({
            message: Schema.String.pipe(Schema.maxLength(4096)),
            signature: Hex.pipe(Schema.minLength(4))
          })
        )
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

export class AccountApi extends HttpApiGroup.make("account")
  .add(
    HttpApiEndpoint.post("signout", "/auth/signout")
      .addSuccess(HttpApiSchema.NoContent)
      .annotate(OpenApi.Summary, "Sign out")
      .annotate(OpenApi.Description, "Revokes the bearer token used for this request; other sessions stay signed in.")
  )
  .add(
    HttpApiEndpoint.get("me", "/me")
      .addSuccess(Me)
      .annotate(OpenApi.Summary, "The signed-in account")
      .annotate(
        OpenApi.Description,
        "The signed-in user's address, identity-check state and card (null until the check is approved). Poll " +
          "it while `kyc` is `pending`: each call may also ask the identity provider about the pending check."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Account")
  .annotate(OpenApi.Description, "The signed-in user's own account: who they are, their card, and signing out.") {}
