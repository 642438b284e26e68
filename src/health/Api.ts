import { HttpApiEndpoint, HttpApiGroup, OpenApi } from "@effect/platform"
import { Schema } from "effect"
import { NotReady } from "../http/ApiError.js"

export class HealthApi extends HttpApiGroup.make("health")
  .add(
    HttpApiEndpoint.get("health", "/health")
      .addSuccess(Schema.Struct({ status: Schema.Literal("ok") }))
      .annotate(OpenApi.Summary, "Liveness")
      .annotate(OpenApi.Description, "Liveness: the process serves HTTP. Checks no dependency.")
  )
  .add(
    HttpApiEndpoint.get("ready", "/ready")
      .addSuccess(
        Schema.Struct({
          status: Schema.Literal("ready"),
          database: Schema.Literal("up"),
          chain: Schema.Literal("up"),
          chainEndpoints: Schema.Array(
            Schema.Struct({
              endpoint: Schema.Int.annotations({ description: "Position in CHAIN_RPC_URL, from 1" }),
              state: Schema.Literal("up", "down", "unchecked", "wrong-chain"),
              latencyMs: Schema.optional(Schema.Number),
              degraded: Schema.optional(
                Schema.Literal("rate-limited", "server-error").annotations({
                  description:
                    "Present while the endpoint is in a backoff after its own fault (a rate limit, a server error): reads go to the other endpoints first. Not an outage while another endpoint answers"
                })
              )
            })
          ).annotations({ description: "Each JSON-RPC endpoint of the chain (none on an in-memory chain)" })
        })
      )
      .addError(NotReady.wire)
      .annotate(OpenApi.Summary, "Readiness")
      .annotate(
        OpenApi.Description,
        "Readiness: the database and the chain each answer within 2 s; 503 NOT_READY names the one that does not. " +
          "The chain is ready while one of its endpoints answers; each endpoint's state is listed, with `degraded` on one that rate-limits us or fails on its side."
      )
  )
  .annotate(OpenApi.Title, "Health")
  .annotate(OpenApi.Description, "Liveness and readiness probes for load balancers and orchestrators.") {}
