/** What this service calls itself in logs, traces, OpenAPI and its landing page. */
export const SERVICE_NAME = "card-service"
export const SERVICE_VERSION = "1.0.0"
