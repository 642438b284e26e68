/**
 * The whole HTTP API: every domain's group, the API-level errors that middleware may raise,
 * and the OpenAPI annotations. Handlers live in each domain's Http.ts.
 */
import { HttpApi, OpenApi } from "@effect/platform"
import {
  BadRequestError,
  InternalErrorError,
  NotFoundError,
  openApiWithServiceErrors,
  PayloadTooLargeError
} from "./ApiError.js"
import { AccountApi, AuthApi } from "./auth/Api.js"
import { HealthApi } from "./health/Api.js"

export class Api extends HttpApi.make("api")
  .add(HealthApi)
  .add(AuthApi)
  .add(AccountApi)
  .addError(BadRequestError)
  .addError(NotFoundError)
  .addError(PayloadTooLargeError)
  .addError(InternalErrorError)
  .annotate(OpenApi.Title, "Card, Agent and Demo Merchant Service")
  .annotate(OpenApi.Version, "1.0.0")
  .annotate(OpenApi.Transform, openApiWithServiceErrors) {}
