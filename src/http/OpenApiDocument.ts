/**
 * What the OpenAPI document says beyond what HttpApi derives from the endpoints: the service's
 * error bodies in place of HttpApi's decode error (ApiError.ts), the contact and licence,
 * discriminated unions as `oneOf`, and the response headers that the request pipeline and the middleware add (HttpApi cannot declare a
 * response header). An endpoint documents its own headers with `withResponseHeaders` in an
 * `OpenApi.Transform` annotation.
 */
import { openApiWithServiceErrors } from "./ApiError.js"

export interface HeaderObject {
  readonly description: string
  readonly schema: Record<string, unknown>
}

interface Response {
  readonly headers?: Record<string, HeaderObject | { readonly $ref: string }>
}

interface Operation {
  readonly security?: ReadonlyArray<Record<string, unknown>>
  readonly responses?: Record<string, Response>
}

/** A string header, as every header is on the wire. */
export const textHeader = (description: string, schema: Record<string, unknown> = {}): HeaderObject => ({
  description,
  schema: { type: "string", ...schema }
})

/** The operation with `headers(status)` added to each of its responses (a response's own headers win). */
export const withResponseHeaders =
  (headers: (status: string, operation: Operation) => Record<string, HeaderObject | { readonly $ref: string }>) =>
  <O extends Operation>(operation: O): O => ({
    ...operation,
    responses: Object.fromEntries(
      Object.entries(operation.responses ?? {}).map(([status, response]) => [
        status,
        { ...response, headers: { ...headers(status, operation), ...response.headers } }
      ])
    )
  })

/** The headers any operation may answer with, as components. */
const serviceHeaders = {
  RequestId: textHeader(
    "Identifies the request in the service's logs and traces: the request's own x-request-id when it is " +
      "1 to 128 characters of A-Z a-z 0-9 . _ -, else a fresh UUID.",
    { pattern: "^[A-Za-z0-9._-]{1,128}$" }
  ),
  RetryAfter: {
    description: "Seconds to wait before retrying.",
    schema: { type: "integer", minimum: 0 }
  },
  WwwAuthenticate: textHeader('The bearer challenge: `Bearer realm="api"`.'),
  CacheControl: textHeader(
    "`no-store`: no cache may keep an answer of this API (they carry card data, tokens and personal data).",
    { enum: ["no-store"] }
  )
} satisfies Record<string, HeaderObject>

const headerRef = (name: keyof typeof serviceHeaders) => ({ $ref: `#/components/headers/${name}` })

/**
 * Every response carries x-request-id and `Cache-Control: no-store`; 429 and 503 say when to retry; a
 * refused bearer token says how to authenticate.
 */
const withServiceHeaders = withResponseHeaders((status, operation) => ({
  "x-request-id": headerRef("RequestId"),
  "Cache-Control": headerRef("CacheControl"),
  ...(status === "429" || status === "503" ? { "Retry-After": headerRef("RetryAfter") } : {}),
  ...(status === "401" && (operation.security ?? []).some((requirement) => "bearer" in requirement)
    ? { "WWW-Authenticate": headerRef("WwwAuthenticate") }
    : {})
}))

interface Document {
  readonly info?: Record<string, unknown>
  readonly paths?: Record<string, Record<string, Operation>>
  readonly components?: { readonly schemas?: Record<string, object> } & Record<string, unknown>
}

/**
 * A union with a discriminator (a `jsonSchema` annotation) as `oneOf`: its members exclude one another
 * by that property, and HttpApi writes every union as `anyOf`.
 */
const exclusiveUnions = (schemas: Record<string, object>) =>
  Object.fromEntries(
    Object.entries(schemas).map(([name, schema]) => {
      if (!("discriminator" in schema && "anyOf" in schema)) return [name, schema]
      const { anyOf, ...rest } = schema
      return [name, { ...rest, oneOf: anyOf }]
    })
  )

/** The document HttpApi derives, completed (the `OpenApi.Transform` of the whole API). */
export const completeDocument = (spec: Record<string, unknown>): Record<string, unknown> => {
  const document = openApiWithServiceErrors(spec) as Document
  return {
    ...document,
    info: {
      ...document.info,
      contact: { name: "Card service maintainers" },
      license: { name: "Proprietary", identifier: "LicenseRef-Proprietary" }
    },
    paths: Object.fromEntries(
      Object.entries(document.paths ?? {}).map(([path, operations]) => [
        path,
        Object.fromEntries(
          Object.entries(operations).map(([method, operation]) => [method, withServiceHeaders(operation)])
        )
      ])
    ),
    components: {
      ...document.components,
      schemas: exclusiveUnions(document.components?.schemas ?? {}),
      headers: serviceHeaders
    }
  }
}
