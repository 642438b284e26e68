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
        Schema.Struct({ status: Schema.Literal("ready"), database: Schema.Literal("up"), chain: Schema.Literal("up") })
      )
      .addError(NotReady.wire)
      .annotate(OpenApi.Summary, "Readiness")
      .annotate(
        OpenApi.Description,
        "Readiness: the database and the chain each answer within 2 s; 503 NOT_READY names the one that does not."
      )
  )
  .annotate(OpenApi.Title, "Health")
  .annotate(OpenApi.Description, "Liveness and readiness probes for load balancers and orchestrators.") {}
