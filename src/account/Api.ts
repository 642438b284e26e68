/** The signed-in user's own account over HTTP: `GET /me` and sign-out. */
import { HttpApiEndpoint, HttpApiGroup, HttpApiSchema, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { Card } from "../cards/Card.js"
import { Address } from "../chain/Address.js"
import { KycState } from "../kyc/KycState.js"

export class Me extends Schema.Class<Me>("Me")({
  address: Address,
  kyc: KycState,
  card: Schema.NullOr(Card),
  createdAt: Schema.Number.annotations({ description: "ms since epoch" })
}) {}

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
