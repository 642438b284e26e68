/**
 * The wire error model: every error response body is `{ error, code }`.
 *
 * Inside the program errors are `Schema.TaggedError` classes (yieldable, matched by `_tag`).
 * `wireError` turns such a class into the schema HttpApi encodes with: the body carries the
 * human message and a fixed SCREAMING_SNAKE_CASE code, the status comes from the annotation,
 * and no `_tag` reaches the wire. Because the code is a literal, the typed client decodes each
 * body back into the right class even when several errors share a status.
 */
import { HttpApiSchema } from "@effect/platform"
import { Schema } from "effect"

/** Constructor shape shared by the error classes of this service. */
export interface ErrorClass<A> {
  new (props: { readonly error: string }): A
}

export const wireError = <A extends { readonly error: string }, I, const Code extends string>(
  cls: Schema.Schema<A, I> & ErrorClass<A>,
  code: Code,
  status: number,
  description: string
) =>
  Schema.transform(
    Schema.Struct({ error: Schema.String, code: Schema.Literal(code) }).annotations({
      identifier: code,
      description
    }),
    Schema.typeSchema(cls),
    {
      strict: true,
      decode: ({ error }) => new cls({ error }),
      encode: ({ error }) => ({ error, code })
    }
  ).annotations(HttpApiSchema.annotations({ status }))

/** The generic body shape, for documentation and for tests that read raw responses. */
export const ErrorBody = Schema.Struct({ error: Schema.String, code: Schema.optional(Schema.String) }).annotations({
  identifier: "ErrorBody"
})
export type ErrorBody = typeof ErrorBody.Type

export class BadRequest extends Schema.TaggedError<BadRequest>()("BadRequest", { error: Schema.String }) {}
export const BadRequestError = wireError(
  BadRequest,
  "BAD_REQUEST",
  400,
  "The request is malformed; the message names the field."
)

export class NotFound extends Schema.TaggedError<NotFound>()("NotFound", { error: Schema.String }) {}
export const NotFoundError = wireError(NotFound, "NOT_FOUND", 404, "No such route or resource.")

export class Unauthorized extends Schema.TaggedError<Unauthorized>()("Unauthorized", { error: Schema.String }) {}
export const UnauthorizedError = wireError(
  Unauthorized,
  "UNAUTHORIZED",
  401,
  "Missing, invalid, expired or revoked bearer token."
)

export class PayloadTooLarge extends Schema.TaggedError<PayloadTooLarge>()("PayloadTooLarge", {
  error: Schema.String
}) {}
export const PayloadTooLargeError = wireError(
  PayloadTooLarge,
  "PAYLOAD_TOO_LARGE",
  413,
  "The request body is too large."
)

export class RateLimited extends Schema.TaggedError<RateLimited>()("RateLimited", { error: Schema.String }) {}
export const RateLimitedError = wireError(
  RateLimited,
  "RATE_LIMITED",
  429,
  "Too many requests from this client; see Retry-After."
)

export class InternalError extends Schema.TaggedError<InternalError>()("InternalError", { error: Schema.String }) {}
export const InternalErrorError = wireError(InternalError, "INTERNAL", 500, "An internal fault; nothing more is said.")

export class NotReady extends Schema.TaggedError<NotReady>()("NotReady", { error: Schema.String }) {}
export const NotReadyError = wireError(NotReady, "NOT_READY", 503, "A dependency (the database) is unreachable.")

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
