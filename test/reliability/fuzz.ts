/**
 * A schema-driven HTTP fuzzer: for every operation of `/openapi.json` it builds requests from the
 * operation's own parameter and body schemas (valid values, then one part at a time replaced by a
 * hostile one), plus whole-request attacks (broken JSON, deep nesting, wrong content types, odd
 * paths and headers) and raw-socket cases for Node's parser. Deterministic: one seeded generator.
 */
import { type Agent, request as httpRequest } from "node:http"
import { hostileValues, pick, type Rng, rawBodies, stringFromPattern } from "./values.js"

export interface JsonSchema {
  readonly $ref?: string
  readonly type?: string | ReadonlyArray<string>
  readonly enum?: ReadonlyArray<unknown>
  readonly pattern?: string
  readonly minLength?: number
  readonly maxLength?: number
  readonly properties?: Readonly<Record<string, JsonSchema>>
  readonly required?: ReadonlyArray<string>
  readonly additionalProperties?: boolean | JsonSchema
  readonly items?: JsonSchema
  readonly anyOf?: ReadonlyArray<JsonSchema>
  readonly allOf?: ReadonlyArray<JsonSchema>
}

interface Parameter {
  readonly in: "path" | "query" | "header"
  readonly name: string
  readonly required?: boolean
  readonly schema?: JsonSchema
}

export interface Operation {
  readonly method: string
  readonly path: string
  readonly parameters: ReadonlyArray<Parameter>
  /** The body's media type and schema, when the operation takes one. */
  readonly body: { readonly mediaType: string; readonly schema: JsonSchema } | undefined
}

export interface Spec {
  readonly paths: Readonly<Record<string, Readonly<Record<string, unknown>>>>
  readonly components?: { readonly schemas?: Readonly<Record<string, JsonSchema>> }
}

export interface FuzzRequest {
  readonly operation: string
  readonly method: string
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  readonly body?: string | Uint8Array
}

/** Known-good values the generator mixes in, so that requests also reach past the first checks. */
export interface Fixtures {
  readonly pathValues: Readonly<Record<string, ReadonlyArray<string>>>
  readonly bearer: string
  /** PAYMENT-SIGNATURE values shaped like real payments (some valid, most subtly wrong). */
  readonly paymentHeaders: ReadonlyArray<string>
}

export const operationsOf = (spec: Spec): ReadonlyArray<Operation> =>
  Object.entries(spec.paths).flatMap(([path, methods]) =>
    Object.entries(methods).map(([method, raw]) => {
      const operation = raw as {
        parameters?: ReadonlyArray<Parameter>
        requestBody?: { content?: Readonly<Record<string, { schema: JsonSchema }>> }
      }
      const [mediaType, content] = Object.entries(operation.requestBody?.content ?? {})[0] ?? []
      return {
        method: method.toUpperCase(),
        path,
        parameters: operation.parameters ?? [],
        body: mediaType === undefined || content === undefined ? undefined : { mediaType, schema: content.schema }
      }
    })
  )

const resolve = (spec: Spec, schema: JsonSchema): JsonSchema =>
  schema.$ref === undefined
    ? schema
    : resolve(spec, spec.components?.schemas?.[schema.$ref.replace("#/components/schemas/", "")] ?? {})

/** A value that satisfies `schema` as far as this generator understands it. */
export const validValue = (spec: Spec, raw: JsonSchema, rng: Rng, depth = 0): unknown => {
  const schema = resolve(spec, raw)
  if (schema.enum !== undefined) return pick(rng, schema.enum)
  if (schema.anyOf !== undefined) return validValue(spec, pick(rng, schema.anyOf), rng, depth + 1)
  if (schema.allOf !== undefined) {
    return Object.assign({}, ...schema.allOf.map((part) => validValue(spec, part, rng, depth + 1)))
  }
  const type = Array.isArray(schema.type) ? pick(rng, schema.type) : schema.type
  switch (type) {
    case "string": {
      if (schema.pattern !== undefined) return stringFromPattern(schema.pattern, rng)
      const min = schema.minLength ?? 1
      const max = Math.min(schema.maxLength ?? 24, min + 24)
      return Array.from({ length: min + Math.floor(rng() * (max - min + 1)) }, () =>
        String.fromCharCode(97 + Math.floor(rng() * 26))
      ).join("")
    }
    case "integer":
      return Math.floor(rng() * 100)
    case "number":
      return Math.round(rng() * 10_000) / 100
    case "boolean":
      return rng() < 0.5
    case "null":
      return null
    case "array":
      return depth > 4
        ? []
        : Array.from({ length: Math.floor(rng() * 3) }, () => validValue(spec, schema.items ?? {}, rng, depth + 1))
    default: {
      if (depth > 4) return {}
      const properties = Object.entries(schema.properties ?? {})
      return Object.fromEntries(
        properties
          .filter(([name]) => (schema.required ?? []).includes(name) || rng() < 0.6)
          .map(([name, property]) => [name, validValue(spec, property, rng, depth + 1)])
      )
    }
  }
}

/** Replaces one leaf of `value` (or the value itself) with a hostile one. */
const mutateOnce = (value: unknown, rng: Rng): unknown => {
  if (typeof value === "object" && value !== null && rng() < 0.8) {
    const keys = Object.keys(value)
    if (keys.length > 0 && rng() < 0.85) {
      const key = pick(rng, keys)
      const copy = (Array.isArray(value) ? [...value] : { ...value }) as Record<string, unknown>
      copy[key] = mutateOnce((value as Record<string, unknown>)[key], rng)
      return copy
    }
    // An extra property with a hostile name and value.
    return { ...value, [String(pick(rng, hostileValues.strings)).slice(0, 200)]: pick(rng, hostileValues.any) }
  }
  return pick(rng, hostileValues.any)
}

const encodePath = (template: string, values: Readonly<Record<string, string>>) =>
  template.replace(/\{(\w+)\}/g, (_, name: string) => values[name] ?? "x")

/** Percent-encodes the UTF-8 bytes of any string (an unpaired surrogate becomes U+FFFD's bytes). */
const percentEncode = (text: string) =>
  [...Buffer.from(text, "utf8")]
    .map((byte) =>
      /[A-Za-z0-9_.~-]/.test(String.fromCharCode(byte))
        ? String.fromCharCode(byte)
        : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`
    )
    .join("")

const encodeQuery = (entries: ReadonlyArray<readonly [string, string]>) =>
  entries.length === 0 ? "" : `?${entries.map(([k, v]) => `${k}=${percentEncode(v)}`).join("&")}`

const asText = (value: unknown) => (typeof value === "string" ? value : (JSON.stringify(value) ?? "null"))

/** Odd but well-formed paths and path segments, sent as is. */
const hostilePathSegments = [
  "%00",
  "%ZZ",
  "%E0%A4%A",
  "%ED%A0%80",
  "..%2F..%2Fetc%2Fpasswd",
  "%2e%2e",
  "a".repeat(3000),
  "%F0%9F%92%A5",
  "%C0%AF",
  "null",
  "-1",
  "0x",
  "__proto__",
  "constructor"
]

/** One request for `operation`, built with the strategy the generator draws. */
export const requestFor = (spec: Spec, operation: Operation, fixtures: Fixtures, rng: Rng): FuzzRequest => {
  const strategy = rng()
  const pathValues: Record<string, string> = {}
  const query: Array<readonly [string, string]> = []
  const headers: Record<string, string> = {}
  for (const parameter of operation.parameters) {
    const known = fixtures.pathValues[parameter.name]
    const valid =
      known !== undefined && rng() < 0.7 ? pick(rng, known) : asText(validValue(spec, parameter.schema ?? {}, rng))
    const value = strategy < 0.25 && rng() < 0.5 ? asText(pick(rng, hostileValues.any)) : valid
    if (parameter.in === "path") {
      pathValues[parameter.name] =
        strategy < 0.1 ? pick(rng, hostilePathSegments) : percentEncode(value).slice(0, 4_000)
    } else if (parameter.in === "query") {
      if (parameter.required === true || rng() < 0.7) query.push([parameter.name, value.slice(0, 4_000)])
    } else if (parameter.name === "payment-signature") {
      if (rng() < 0.8) {
        headers[parameter.name] =
          rng() < 0.7
            ? pick(rng, fixtures.paymentHeaders)
            : Buffer.from(asText(mutateOnce(value, rng))).toString("base64")
      }
    } else if (rng() < 0.7) {
      headers[parameter.name] = value.replace(/[^\x20-\x7e]/g, "?").slice(0, 4_000)
    }
  }
  if (rng() < 0.5)
    headers.authorization = rng() < 0.6 ? `Bearer ${fixtures.bearer}` : pick(rng, hostileValues.authorizations)
  if (strategy > 0.9 && strategy < 0.95) query.push(["extra", asText(pick(rng, hostileValues.strings)).slice(0, 2_000)])
  const path = encodePath(operation.path, pathValues) + encodeQuery(query)
  const base = { operation: `${operation.method} ${operation.path}`, method: operation.method, path }
  if (operation.body === undefined) return { ...base, headers }
  const form = operation.body.mediaType.includes("form")
  const contentType = form ? "application/x-www-form-urlencoded" : "application/json"
  const value = validValue(spec, operation.body.schema, rng)
  if (strategy > 0.95) {
    // A whole body no schema allows: broken JSON, deep nesting, NUL, invalid UTF-8, a wrong type.
    const raw = pick(rng, rawBodies)
    return { ...base, headers: { ...headers, "content-type": raw.contentType ?? contentType }, body: raw.body }
  }
  const body = strategy > 0.35 ? mutateOnce(value, rng) : value
  const text = form
    ? new URLSearchParams(
        Object.entries(typeof body === "object" && body !== null ? body : { value: body }).map(
          ([k, v]): [string, string] => [k, asText(v)]
        )
      ).toString()
    : asText(body)
  return { ...base, headers: { ...headers, "content-type": contentType }, body: text }
}

/** Requests no operation declares: other methods, odd paths, CORS preflights, HEAD. */
export const requestsOffTheSchema = (operations: ReadonlyArray<Operation>, rng: Rng): ReadonlyArray<FuzzRequest> =>
  operations.flatMap((operation) => {
    const path = encodePath(operation.path, {})
    const base = { operation: `(off schema) ${operation.path}` }
    return [
      { ...base, method: "DELETE", path, headers: {} },
      { ...base, method: "PATCH", path, headers: { "content-type": "application/json" }, body: "{}" },
      { ...base, method: "HEAD", path, headers: {} },
      {
        ...base,
        method: "OPTIONS",
        path,
        headers: {
          origin: pick(rng, ["https://app.example.com", "https://evil.example", "null"]),
          "access-control-request-method": operation.method
        }
      },
      { ...base, method: operation.method, path: `${path}/`, headers: {} },
      { ...base, method: operation.method, path: `/${path}`, headers: {} },
      { ...base, method: operation.method, path: `${path}?${"a=1&".repeat(500)}`, headers: {} },
      { ...base, method: operation.method, path: path.toUpperCase(), headers: {} }
    ]
  })

export interface Outcome {
  readonly request: string
  /** Undefined: no response (a hang past the limit, or the connection was cut). */
  readonly status: number | undefined
  readonly body: string
  readonly hung: boolean
}

/** Sends one request with node:http (nothing normalised on the way) and reads the whole answer. */
export const sendRaw = (port: number, agent: Agent, request: FuzzRequest, limitMs: number) =>
  new Promise<Outcome>((done) => {
    const describe = `${request.method} ${request.path.slice(0, 120)}`
    const timer = setTimeout(() => {
      outgoing.destroy()
      done({ request: describe, status: undefined, body: "", hung: true })
    }, limitMs)
    const finish = (outcome: Outcome) => {
      clearTimeout(timer)
      done(outcome)
    }
    const outgoing = httpRequest(
      { host: "127.0.0.1", port, agent, method: request.method, path: request.path, headers: request.headers },
      (response) => {
        // An event stream (GET /me/events) stays open by design: its 200 and headers are the answer.
        if (response.statusCode === 200 && response.headers["content-type"]?.startsWith("text/event-stream")) {
          outgoing.destroy()
          return finish({ request: describe, status: 200, body: "", hung: false })
        }
        const chunks: Array<Buffer> = []
        response.on("data", (chunk: Buffer) => chunks.push(chunk))
        response.on("end", () =>
          finish({
            request: describe,
            status: response.statusCode,
            body: Buffer.concat(chunks).toString("utf8"),
            hung: false
          })
        )
        response.on("error", () => finish({ request: describe, status: response.statusCode, body: "", hung: false }))
      }
    )
    outgoing.on("error", () => finish({ request: describe, status: undefined, body: "", hung: false }))
    outgoing.end(request.body)
  })

const ERROR_CODE = /^[A-Z][A-Z0-9_]*$/

/** Whether an error answer has the service's `{error, code}` shape (the x402 402 body has both too). */
export const conformingErrorBody = (body: string): boolean => {
  try {
    const parsed = JSON.parse(body) as { error?: unknown; code?: unknown }
    return typeof parsed.error === "string" && typeof parsed.code === "string" && ERROR_CODE.test(parsed.code)
  } catch {
    return false
  }
}

/** Runs `tasks` with at most `concurrency` at once. */
export const pool = async <A>(tasks: ReadonlyArray<() => Promise<A>>, concurrency: number): Promise<Array<A>> => {
  const results: Array<A> = new Array(tasks.length)
  let next = 0
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (next < tasks.length) {
        const index = next++
        results[index] = await tasks[index]!()
      }
    })
  )
  return results
}
