/**
 * The embedded devnet's faucet over HTTP: test USD1 for the signed-in address, so that a
 * development key made in the web app can pay the demo merchant. The group exists only while the
 * service runs its embedded devnet (a chain that can mint): elsewhere `/devnet/*` is not served and
 * not in the OpenAPI document.
 */
import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { Authentication } from "../auth/Api.js"
import { Address } from "../chain/Address.js"
import { ChainUnavailable, RateLimited } from "../http/ApiError.js"

export const FaucetGrant = Schema.Struct({
  address: Address.annotations({ description: "the signed-in address, which received the grant" }),
  grantedUsd1: Schema.Number.annotations({ description: "USD1 given by this call" }),
  usd1: Schema.Number.annotations({ description: "the address's USD1 balance after the grant" })
}).annotations({ identifier: "FaucetGrant" })

export class DevnetApi extends HttpApiGroup.make("devnet")
  .add(
    HttpApiEndpoint.post("faucet", "/devnet/faucet")
      .addSuccess(FaucetGrant)
      .addError(RateLimited.wire)
      .addError(ChainUnavailable.wire)
      .annotate(OpenApi.Summary, "Test USD1 (embedded devnet only)")
      .annotate(
        OpenApi.Description,
        "Gives the signed-in address 100 test USD1 and some gas on the embedded devnet, so that a development " +
          "key can pay the demo merchant. Rate limited per client (RATE_LIMIT_FAUCET a minute). Served only while " +
          "the service runs its embedded devnet."
      )
  )
  .middleware(Authentication)
  .annotate(OpenApi.Title, "Devnet")
  .annotate(
    OpenApi.Description,
    "Only while the service runs its embedded devnet (CHAIN_RPC_URL unset): test funds for development keys."
  ) {}
