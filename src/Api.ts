/**
 * The HTTP API: every domain's group, the API-level errors that middleware may raise, and the
 * OpenAPI annotations. Handlers live in each domain's Http.ts.
 *
 * `CoreApi` is always served. `Api` adds the groups of the parts switched on by configuration or
 * by the ports in force: handlers are built against it and the typed client knows all of it. Each
 * of those parts is declared once, beside its handlers, as a `Feature` (http/Feature.ts), and
 * App.ts serves the core with the parts that are on.
 */

import { HttpApi, OpenApi } from "@effect/platform"
import { AccountApi, SignInApi } from "./account/Api.js"
import { AgentApi, StrategyApi } from "./agent/Api.js"
import { AuthorizationsApi, CardNetworkApi, CardSandboxApi } from "./authorizations/Api.js"
import { CardApi, StatementApi } from "./cards/Api.js"
import { DevnetApi } from "./devnet/Api.js"
import { EventsApi, StreamEvent } from "./events/Api.js"
import { HealthApi } from "./health/Api.js"
import {
  BadRequest,
  DatabaseUnavailable,
  InternalError,
  NotFound,
  PayloadTooLarge,
  UnsupportedMediaType
} from "./http/ApiError.js"
import { completeDocument } from "./http/OpenApiDocument.js"
import { KycApi, KycSandboxApi, KycWebhookApi } from "./kyc/Api.js"
import { MarketApi } from "./market/Api.js"
import { MerchantApi } from "./merchant/Api.js"
import { SERVICE_VERSION } from "./runtime/ServiceInfo.js"

export class CoreApi extends HttpApi.make("api")
  .add(HealthApi)
  .add(SignInApi)
  .add(AccountApi)
  .add(KycApi)
  .add(KycWebhookApi)
  .add(KycSandboxApi)
  .add(MarketApi)
  .add(StatementApi)
  .add(CardApi)
  .add(AuthorizationsApi)
  .add(CardNetworkApi)
  .add(StrategyApi)
  .add(EventsApi)
  .addError(BadRequest.wire)
  .addError(NotFound.wire)
  .addError(PayloadTooLarge.wire)
  .addError(UnsupportedMediaType.wire)
  .addError(InternalError.wire)
  .addError(DatabaseUnavailable.wire)
  .annotate(OpenApi.Title, "Card, Agent and Demo Merchant Service")
  .annotate(OpenApi.Version, SERVICE_VERSION)
  .annotate(
    OpenApi.Description,
    "The backend of a payment-card app: wallet sign-in (EIP-4361), an identity check that issues the card, card " +
      "payments at merchants authorized in real time from the card wallet's USD1, the card statement, an agent that keeps the card funded from a stock-token portfolio, US market hours, and a " +
      "demo merchant paid over x402. Every error body is `{ error, code }`; every time is milliseconds since epoch."
  )
  // The event stream's frames, which the text/event-stream response refers to.
  .annotate(HttpApi.AdditionalSchemas, [StreamEvent])
  .annotate(OpenApi.Transform, completeDocument) {}

/** Every group: the core's, the demo merchant's, the agent's, the devnet faucet's and the sandbox card network's. */
export class Api extends CoreApi.add(MerchantApi).add(AgentApi).add(DevnetApi).add(CardSandboxApi) {}
