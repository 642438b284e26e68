/**
 * The wire error model: every error response body is `{ error, code }`.
 *
 * An API error is declared once, with `ApiError(tag, code, status, description)`:
 *
 *     export class OrderExpired extends ApiError("OrderExpired", "ORDER_EXPIRED", 409, "The order expired unpaid.") {}
 *
 * Inside the program it is a `Schema.TaggedError` (yieldable, matched by `_tag`); endpoints list
 * `OrderExpired.wire`, the schema HttpApi encodes it with: the body carries the human message and
 * the fixed SCREAMING_SNAKE_CASE code, the status comes from the annotation, and no `_tag` reaches
 * the wire. Because the code is a literal, the typed client decodes each body back into the right
 * error even when several errors share a status.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

export const ApiError = <const Tag extends string, const Code extends string>(
  tag: Tag,
  code: Code,
  status: number,
  description: string
) => {
  class Base extends Schema.TaggedError<Base>()(tag, { error: Schema.String }) {
    static readonly code: Code = code
    static readonly status = status
    /** The `{ error, code }` body schema, with the HTTP status, for `.addError(...)`. */
    static readonly wire = Schema.transform(
      Schema.Struct({ error: Schema.String, code: Schema.Literal(code) }).annotations({
        identifier: code,
        description
      }),
      Schema.typeSchema(Base),
      {
        strict: true,
        decode: ({ error }) => new Base({ error }),
        encode: ({ error }) => ({ error, code })
      }
    ).annotations(HttpApiSchema.annotations({ status }))
  }
  return Base
}

export class BadRequest extends ApiError(
  "BadRequest",
  "BAD_REQUEST",
  400,
  "The request is malformed; the message names the field."
) {}

export class NotFound extends ApiError("NotFound", "NOT_FOUND", 404, "No such route or resource.") {}

export class Unauthorized extends ApiError(
  "Unauthorized",
  "UNAUTHORIZED",
  401,
  "Missing, invalid, expired or revoked bearer token."
) {}

export class PayloadTooLarge extends ApiError(
  "PayloadTooLarge",
  "PAYLOAD_TOO_LARGE",
  413,
  "The request body is too large."
) {}

export class RateLimited extends ApiError(
  "RateLimited",
  "RATE_LIMITED",
  429,
  "Too many requests from this client; see Retry-After."
) {}

export class InternalError extends ApiError(
  "InternalError",
  "INTERNAL",
  500,
  "An internal fault; nothing more is said."
) {}

export class UnsupportedMediaType extends ApiError(
  "UnsupportedMediaType",
  "UNSUPPORTED_MEDIA_TYPE",
  415,
  "The request body's content type is not one this API reads (JSON, or a URL-encoded form)."
) {}

export class RequestTimeout extends ApiError(
  "RequestTimeout",
  "REQUEST_TIMEOUT",
  408,
  "The request did not arrive whole within HTTP_REQUEST_TIMEOUT (or its headers within HTTP_HEADERS_TIMEOUT)."
) {}

export class HeadersTooLarge extends ApiError(
  "HeadersTooLarge",
  "HEADERS_TOO_LARGE",
  431,
  "The request line and headers exceed 16 KiB."
) {}

export class NotReady extends ApiError(
  "NotReady",
  "NOT_READY",
  503,
  "A dependency (the database or the chain) is unreachable; the message names which."
) {}

export class DatabaseUnavailable extends ApiError(
  "DatabaseUnavailable",
  "DATABASE_UNAVAILABLE",
  503,
  "The database did not answer in time; retry later (see Retry-After)."
) {}

export class ChainUnavailable extends ApiError(
  "ChainUnavailable",
  "CHAIN_UNAVAILABLE",
  503,
  "The chain did not answer in time; retry later (see Retry-After)."
) {}

/** Replaces HttpApi's built-in decode-error schema with ours in the OpenAPI document. */
export const openApiWithServiceErrors = (spec: Record<string, unknown>): Record<string, unknown> => {
  const decodeRef = "#/components/schemas/HttpApiDecodeError"
  const rewrite = (node: unknown): unknown => {
    if (Array.isArray(node)) return node.map(rewrite)
    if (typeof node !== "object" || node === null) return node
    const record = node as Record<string, unknown>
    if (Array.isArray(record.anyOf)) {
      const kept = record.anyOf.filter((option) => (option as { $ref?: string }).$ref !== decodeRef)
      if (kept.length === 1) return rewrite(kept[0])
      return { ...record, anyOf: kept.map(rewrite) }
    }
    return Object.fromEntries(Object.entries(record).map(([key, value]) => [key, rewrite(value)]))
  }
  const out = rewrite(spec) as { components?: { schemas?: Record<string, unknown> } }
  for (const name of ["HttpApiDecodeError", "Issue", "PropertyKey"]) delete out.components?.schemas?.[name]
  return out as Record<string, unknown>
}
