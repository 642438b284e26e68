/**
 * A request that does not match its schema is told, field by field, what each field must be: the
 * formatter on the shapes the API's request schemas take, then every operation of /openapi.json
 * (merchant and agent on) sent each of its fields with values of the wrong type. No message quotes
 * the schema engine ("Expected string, actual 5") or dumps a schema.
 */
import { describe, expect, it, layer } from "@effect/vitest"
import { Effect, Either, ParseResult, Schema } from "effect"
import { ScriptedAgentWallet } from "../../src/agent/ScriptedAgentWallet.js"
import { Address } from "../../src/chain/Address.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { describeIssue, withFieldMessages } from "../../src/http/FieldMessages.js"
import { AtQuery } from "../../src/market/Api.js"
import { type JsonSchema, operationsOf, type Spec } from "../reliability/fuzz.js"
import { newAccount, signIn } from "../support/auth.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"

/** The engine's words and the shapes of its schema dumps. */
const ENGINE_TEXT = /Expected|\bactual\b|readonly |ReadonlyArray|\{ \w+\??: |=>/

/** The message a value gets from a request schema, as HttpApi reads it (ArrayFormatter). */
const messageOf = (schema: Schema.Schema.Any, value: unknown) => {
  const decoded = Schema.decodeUnknownEither(withFieldMessages(schema as Schema.Schema<unknown, unknown>))(value)
  if (Either.isRight(decoded)) throw new Error(`${JSON.stringify(value)} was accepted`)
  const issues = ParseResult.ArrayFormatter.formatErrorSync(decoded.left)
  // One issue per request part, with the whole message: the error normaliser joins the parts.
  expect(issues).toHaveLength(1)
  expect(describeIssue(decoded.left.issue)).toBe(issues[0]!.message)
  return issues[0]!.message
}

describe("describeIssue", () => {
  const Session = Schema.NullOr(Schema.Struct({ returnUrl: Schema.optional(Schema.String) }))

  it("an optional field of the wrong type is one clause, null or not", () => {
    expect(messageOf(Session, { returnUrl: 5 })).toBe("returnUrl: must be a string")
    expect(messageOf(Session, { returnUrl: null })).toBe("returnUrl: must be a string")
  })

  it("a body of the wrong type is told what it must be, not shown the schema", () => {
    expect(messageOf(Session, [])).toBe("body: must be an object or null")
    expect(messageOf(Schema.Struct({ address: Address }), "text")).toBe("body: must be an object")
  })

  it("a field's own message wins over its type; a missing one is required", () => {
    const Challenge = Schema.Struct({ address: Address })
    expect(messageOf(Challenge, { address: 5 })).toBe("address: must be a 0x-prefixed 20-byte hex address")
    expect(messageOf(Challenge, {})).toBe("address: is required")
  })

  it("nested fields are named by their path; literals list the values allowed", () => {
    const Body = Schema.Struct({
      targets: Schema.Record({ key: Schema.String, value: Schema.Number }),
      outcome: Schema.optional(Schema.Literal("approve", "decline"))
    })
    expect(messageOf(Body, { targets: { NVDA: "half" } })).toBe("targets.NVDA: must be a number")
    expect(messageOf(Body, { targets: {}, outcome: "maybe" })).toBe('outcome: must be one of "approve", "decline"')
    expect(messageOf(Schema.Struct({ n: Schema.NullOr(Schema.String) }), { n: 1 })).toBe("n: must be a string or null")
  })

  it("a filter describes itself; a transformation's own failure message is kept", () => {
    expect(messageOf(Schema.Struct({ m: Schema.String.pipe(Schema.maxLength(3)) }), { m: "abcd" })).toBe(
      "m: must be a string at most 3 character(s) long"
    )
    expect(messageOf(AtQuery, { at: "yesterday" })).toBe(
      "at: must be an ISO-8601 date-time with a zone (2026-11-27T17:59:00Z) or milliseconds since epoch"
    )
  })
})

/**
 * A body each operation accepts as far as its schema goes; each test request spoils one field of it.
 * An operation with a body missing here fails the test: give it one.
 */
const VALID_BODIES: Readonly<Record<string, { readonly json: object } | { readonly form: Record<string, string> }>> = {
  "POST /auth/challenge": { json: { address: newAccount().address } },
  "POST /auth/verify": { json: { message: "hello", signature: "0x0000" } },
  "POST /kyc/session": { json: {} },
  "POST /kyc/sandbox/{sessionId}": { form: { outcome: "approve" } },
  "PUT /strategy": { json: { targets: { NVDA: 1 }, weeklySpendUsd: 10 } },
  "POST /merchant/orders": { json: { amount: "1.00", description: "Tea" } },
  "PUT /card/controls": { json: { frozen: false } },
  "POST /card/allowance/request": { json: { capUsd: 10, validDays: 7 } },
  "POST /card/allowance": { json: { signature: `0x${"11".repeat(65)}` } },
  "POST /sandbox/card-network/authorizations": {
    json: {
      cardNumber: "9406000000000019",
      expiry: "12/29",
      cvv: "123",
      amountUsd: "1.00",
      merchant: { name: "Tea", mcc: "5814", country: "USA" }
    }
  },
  "POST /sandbox/card-network/authorizations/{id}/increment": { json: { amountUsd: "1.00" } },
  "POST /sandbox/card-network/authorizations/{id}/reverse": { json: {} },
  "POST /sandbox/card-network/authorizations/{id}/clear": { json: {} },
  "POST /sandbox/card-network/authorizations/{id}/refund": { json: { amountUsd: "1.00" } }
}

/** Read raw and checked by its signature, not decoded by a schema. */
const RAW_BODIES = new Set(["POST /kyc/webhook/{provider}", "POST /card-network/messages"])

const PATH_VALUES: Readonly<Record<string, string>> = {
  provider: "sandbox",
  sessionId: "A".repeat(22),
  token: "NVDA",
  // An order's id and a sandbox authorization's (a UUID) alike.
  id: "00000000-0000-4000-8000-000000000000"
}

const resolve = (spec: Spec, schema: JsonSchema): JsonSchema =>
  schema.$ref === undefined ? schema : resolve(spec, spec.components!.schemas![schema.$ref.split("/").pop()!]!)

/** The JSON types a schema allows ("integer" is a number here). */
const typesOf = (spec: Spec, raw: JsonSchema): ReadonlySet<string> => {
  const schema = resolve(spec, raw)
  if (schema.anyOf !== undefined) return new Set(schema.anyOf.flatMap((member) => [...typesOf(spec, member)]))
  const types = schema.type === undefined ? [] : Array.isArray(schema.type) ? schema.type : [schema.type]
  return new Set(types.map((type) => (type === "integer" ? "number" : type)))
}

const jsonType = (value: unknown) =>
  value === null
    ? "null"
    : Array.isArray(value)
      ? "array"
      : (typeof value as "string" | "number" | "boolean" | "object")

/** Values of every JSON type but those the schema allows. */
const wrongValues = (spec: Spec, schema: JsonSchema): ReadonlyArray<unknown> => {
  const allowed = typesOf(spec, schema)
  return allowed.size === 0 ? [] : [42, "text", true, { a: 1 }, [1], null].filter((v) => !allowed.has(jsonType(v)))
}

/** Whether any text would not do: the schema constrains it (a pattern, a list, a number). */
const constrained = (schema: JsonSchema | undefined) =>
  schema !== undefined &&
  (schema.pattern !== undefined || schema.enum !== undefined || ["integer", "number"].includes(String(schema.type)))

interface Probe {
  readonly what: string
  readonly field: string
  /** Whether the value can only be refused (a parameter's free text may be accepted). */
  readonly mustRefuse: boolean
  readonly request: ReturnType<typeof send>
}

layer(
  testServer(
    { MERCHANT_PAY_TO: "0x000000000000000000000000000000000000dEaD", AGENT_MODE: "dry" },
    { chain: InMemoryChain.layer(), agentWallet: ScriptedAgentWallet.layer() }
  ),
  { excludeTestServices: true }
)("every operation's fields, sent with the wrong types", (it) => {
  it.effect("are refused with a sentence naming the field, never the schema engine's text", () =>
    Effect.gen(function* () {
      const spec: Spec = (yield* send("GET", "/openapi.json")).body
      const { token } = yield* signIn()
      const probes: Array<Probe> = []
      for (const operation of operationsOf(spec)) {
        const name = `${operation.method} ${operation.path}`
        const method = operation.method as "GET" | "POST" | "PUT"
        const headers = { authorization: `Bearer ${token}` }
        const path = operation.path.replace(/\{(\w+)\}/g, (_, param: string) => PATH_VALUES[param] ?? param)
        for (const parameter of operation.parameters) {
          const wrong = parameter.schema?.type === "integer" ? "ten" : "!"
          const url =
            parameter.in === "path"
              ? operation.path.replace(/\{(\w+)\}/g, (_, param: string) =>
                  param === parameter.name ? wrong : (PATH_VALUES[param] ?? param)
                )
              : parameter.in === "query"
                ? `${path}?${parameter.name}=${wrong}`
                : path
          const extra = parameter.in === "header" ? { [parameter.name]: wrong } : {}
          probes.push({
            what: `${name} ${parameter.in} ${parameter.name}=${wrong}`,
            field: parameter.name,
            mustRefuse: constrained(parameter.schema && resolve(spec, parameter.schema)),
            request: send(method, url, { headers: { ...headers, ...extra } })
          })
        }
        if (operation.body === undefined || RAW_BODIES.has(name)) continue
        const valid = VALID_BODIES[name]
        expect(valid, `a valid body for ${name} in VALID_BODIES`).toBeDefined()
        const schema = resolve(spec, operation.body.schema)
        const object = resolve(spec, schema.anyOf?.find((member) => resolve(spec, member).properties) ?? schema)
        for (const [field, property] of Object.entries(object.properties ?? {})) {
          if ("form" in valid!) {
            const tooLong = (property as { maxLength?: number }).maxLength
            const wrongs = [
              ...(property.enum === undefined ? [] : ["nope"]),
              ...(tooLong ? ["x".repeat(tooLong + 1)] : [])
            ]
            for (const wrong of wrongs) {
              probes.push({
                what: `${name} form ${field}=${wrong.slice(0, 10)}`,
                field,
                mustRefuse: true,
                request: send(method, path, { headers, form: { ...valid.form, [field]: wrong } })
              })
            }
          } else {
            for (const wrong of wrongValues(spec, property)) {
              probes.push({
                what: `${name} ${field}=${JSON.stringify(wrong)}`,
                field,
                mustRefuse: true,
                request: send(method, path, { headers, json: { ...valid!.json, [field]: wrong } })
              })
            }
          }
        }
        if ("json" in valid!) {
          for (const wrong of ["text", 42, [1]]) {
            probes.push({
              what: `${name} body ${JSON.stringify(wrong)}`,
              field: "body",
              mustRefuse: true,
              request: send(method, path, { headers, json: wrong })
            })
          }
        }
      }

      const problems: Array<string> = []
      for (const probe of probes) {
        const { body, status } = yield* probe.request
        const message = body?.error ?? ""
        if (probe.mustRefuse && status !== 400) problems.push(`${probe.what}: answered ${status}`)
        if (status === 400 && (body.code !== "BAD_REQUEST" || !message.startsWith(`${probe.field}: `))) {
          problems.push(`${probe.what}: ${JSON.stringify(body)} does not name the field`)
        }
        if (ENGINE_TEXT.test(message)) problems.push(`${probe.what}: "${message}" quotes the schema engine`)
      }
      expect(problems).toEqual([])
      // Every kind of request part was tried.
      for (const kind of ["body", "query limit", "path sessionId", "header last-event-id", "form outcome"]) {
        expect(
          probes.some((probe) => probe.what.includes(kind.startsWith("body") ? " body " : ` ${kind}`)),
          kind
        ).toBe(true)
      }
    })
  )
})
