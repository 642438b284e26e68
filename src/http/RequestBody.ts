/**
 * Request bodies, read once and checked before any handler sees them: the size limit however the
 * body is framed, the content types the API reads, the nesting depth of JSON (checked on the text,
 * before parsing), and text PostgreSQL cannot store (U+0000 and unpaired UTF-16 surrogates, in
 * values and keys). The handlers then read the same bytes from memory.
 */
import type { IncomingMessage } from "node:http"
import { HttpApi, type HttpApiGroup, HttpApiSchema, type HttpServerRequest } from "@effect/platform"
import { Effect, Option, Stream } from "effect"
import { fieldName } from "./FieldMessages.js"

export const MAX_BODY_BYTES = 64 * 1024
/** Deeper JSON than any request of this API needs; parsing and error reporting stay shallow. */
export const MAX_JSON_DEPTH = 64

export type BodyKind = "json" | "form"

/**
 * The kind of body a Content-Type header announces, by its media type (parameters such as
 * `charset` aside): JSON or a URL-encoded form; none for anything else and for no header at all.
 */
export const bodyKind = (contentType: string | undefined): Option.Option<BodyKind> => {
  const mediaType = contentType?.split(";")[0]?.trim().toLowerCase()
  if (mediaType === "application/json") return Option.some("json")
  if (mediaType === "application/x-www-form-urlencoded") return Option.some("form")
  return Option.none()
}

/**
 * The body each endpoint with a payload reads, keyed by `"<METHOD> <path template>"`: a
 * URL-encoded form where its payload schema is encoded as `UrlParams` (the sandbox page's form),
 * JSON everywhere else. Endpoints without a payload read no body.
 */
export const payloadKinds = <Id extends string, Groups extends HttpApiGroup.HttpApiGroup.Any, E, R>(
  api: HttpApi.HttpApi<Id, Groups, E, R>
): ReadonlyMap<string, BodyKind> => {
  const kinds = new Map<string, BodyKind>()
  HttpApi.reflect(api, {
    onGroup: () => {},
    onEndpoint: ({ endpoint }) => {
      if (Option.isNone(endpoint.payloadSchema)) return
      const encoding = HttpApiSchema.getEncoding(endpoint.payloadSchema.value.ast)
      kinds.set(`${endpoint.method} ${endpoint.path}`, encoding.kind === "UrlParams" ? "form" : "json")
    }
  })
  return kinds
}

export const MEDIA_TYPES: Readonly<Record<BodyKind, string>> = {
  json: "application/json",
  form: "application/x-www-form-urlencoded"
}

/** Whether the JSON text nests arrays and objects deeper than `limit` (strings are skipped). */
export const jsonDeeperThan = (text: string, limit: number): boolean => {
  let depth = 0
  let inString = false
  let escaped = false
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i)
    if (inString) {
      if (escaped) escaped = false
      else if (c === 0x5c) escaped = true
      else if (c === 0x22) inString = false
    } else if (c === 0x22) {
      inString = true
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > limit) return true
    } else if (c === 0x5d || c === 0x7d) {
      depth--
    }
  }
  return false
}

const UNPAIRED_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/

/** Why PostgreSQL would refuse this text, if it would. */
const textProblem = (text: string): string | undefined =>
  text.includes("\u0000")
    ? "contains U+0000 (NUL), which is not accepted"
    : UNPAIRED_SURROGATE.test(text)
      ? "contains an unpaired UTF-16 surrogate, which is not valid Unicode"
      : undefined

/**
 * The first string or object key (depth first) that cannot be stored, as "<field>: <problem>".
 * `value` must be parsed JSON no deeper than `MAX_JSON_DEPTH`.
 */
export const unstorableText = (value: unknown, path: ReadonlyArray<string | number> = []): Option.Option<string> => {
  if (typeof value === "string") {
    const problem = textProblem(value)
    return problem === undefined ? Option.none() : Option.some(`${fieldName(path)}: ${problem}`)
  }
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = unstorableText(value[i], [...path, i])
      if (Option.isSome(found)) return found
    }
    return Option.none()
  }
  if (typeof value === "object" && value !== null) {
    for (const [key, item] of Object.entries(value)) {
      const problem = textProblem(key)
      if (problem !== undefined) return Option.some(`${fieldName([...path, key])} (a key): ${problem}`)
      const found = unstorableText(item, [...path, key])
      if (Option.isSome(found)) return found
    }
  }
  return Option.none()
}

/** Whether the request announces a body (a length above zero, or chunked framing). */
export const announcesBody = (headers: Readonly<Record<string, string | undefined>>) =>
  headers["transfer-encoding"] !== undefined || Number(headers["content-length"] ?? 0) > 0

export type ReadOutcome =
  | { readonly _tag: "Read"; readonly bytes: Uint8Array }
  | { readonly _tag: "TooLarge" }
  | { readonly _tag: "Broken" }

/**
 * Reads the whole body, up to `maxBytes`. Past the limit it stops keeping bytes but goes on
 * reading and discarding them (never destroying the socket), so the caller's 413 reaches the
 * client; the server's request timeout bounds how long a body may keep coming.
 */
export const readBody = (source: IncomingMessage, maxBytes: number) =>
  Effect.async<ReadOutcome>((resume) => {
    const chunks: Array<Buffer> = []
    let size = 0
    const onData = (chunk: Buffer) => {
      size += chunk.length
      if (size <= maxBytes) {
        chunks.push(chunk)
        return
      }
      cleanup()
      source.resume()
      resume(Effect.succeed({ _tag: "TooLarge" }))
    }
    const onEnd = () => {
      cleanup()
      // A copy of its own: a small Buffer may be a view into Node's shared pool.
      resume(Effect.succeed({ _tag: "Read", bytes: new Uint8Array(Buffer.concat(chunks)) }))
    }
    const onBroken = () => {
      cleanup()
      resume(Effect.succeed({ _tag: "Broken" }))
    }
    const cleanup = () => {
      source.off("data", onData)
      source.off("end", onEnd)
      source.off("error", onBroken)
      source.off("aborted", onBroken)
    }
    source.on("data", onData)
    source.on("end", onEnd)
    source.on("error", onBroken)
    source.on("aborted", onBroken)
    return Effect.sync(cleanup)
  })

/**
 * The request with its body already read: every body accessor answers from `bytes` (the webhook
 * handler reads them raw, HttpApi reads the text or JSON), the rest is the original request.
 */
export const withReadBody = (
  request: HttpServerRequest.HttpServerRequest,
  body: { readonly bytes: Uint8Array; readonly text: string; readonly json: Option.Option<unknown> }
): HttpServerRequest.HttpServerRequest => {
  const { bytes, text, json: parsedJson } = body
  const overrides: PropertyDescriptorMap = {
    text: { get: () => Effect.succeed(text) },
    // Only JSON bodies are read as JSON, and those were parsed (and checked) already.
    json: { get: () => Effect.succeed(Option.getOrNull(parsedJson)) },
    arrayBuffer: { get: () => Effect.sync(() => bytes.slice().buffer) },
    stream: { get: () => Stream.succeed(bytes) },
    modify: {
      value: (options: Parameters<HttpServerRequest.HttpServerRequest["modify"]>[0]) =>
        withReadBody(request.modify(options), body)
    }
  }
  return Object.create(request, overrides) as HttpServerRequest.HttpServerRequest
}
