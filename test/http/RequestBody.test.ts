import { SqlError } from "@effect/sql"
import { describe, expect, it } from "@effect/vitest"
import { FastCheck, Option } from "effect"
import { Api } from "../../src/Api.js"
import { bodyKind, jsonDeeperThan, payloadKinds, unstorableText } from "../../src/http/RequestBody.js"
import { isDatabaseUnavailable } from "../../src/storage/Sql.js"

/** The nesting depth of parsed JSON, computed on the value. */
const depthOf = (value: unknown): number =>
  typeof value === "object" && value !== null ? 1 + Math.max(0, ...Object.values(value).map(depthOf)) : 0

describe("request bodies", () => {
  it.prop(
    "the depth check on the text agrees with the parsed value's depth, strings included",
    [FastCheck.jsonValue({ maxDepth: 8 }), FastCheck.integer({ min: 0, max: 8 })],
    ([value, limit]) => {
      expect(jsonDeeperThan(JSON.stringify(value), limit)).toBe(depthOf(value) > limit)
    }
  )

  it("brackets and escaped quotes inside strings do not count", () => {
    expect(jsonDeeperThan('{"a":"[[[[\\"{{{{"}', 1)).toBe(false)
    expect(jsonDeeperThan("[[[]]]", 2)).toBe(true)
  })

  it("names the first field PostgreSQL cannot store, in values and keys", () => {
    expect(unstorableText({ ok: "fine", items: [{ name: "a\u0000" }] })).toEqual(
      Option.some("items.0.name: contains U+0000 (NUL), which is not accepted")
    )
    expect(unstorableText({ "\ud83d": 1 })).toEqual(
      Option.some("\\ud83d (a key): contains an unpaired UTF-16 surrogate, which is not valid Unicode")
    )
    expect(unstorableText("x\udc00")).toEqual(
      Option.some("body: contains an unpaired UTF-16 surrogate, which is not valid Unicode")
    )
    expect(unstorableText({ emoji: "💥", text: "é", n: 1, list: [null, true] })).toEqual(Option.none())
  })

  it("reads JSON and URL-encoded forms by their media type, nothing else and nothing unannounced", () => {
    expect(bodyKind("application/json; charset=utf-8")).toEqual(Option.some("json"))
    expect(bodyKind(" Application/JSON ")).toEqual(Option.some("json"))
    expect(bodyKind("application/x-www-form-urlencoded")).toEqual(Option.some("form"))
    for (const type of [
      undefined,
      "multipart/form-data; boundary=x",
      "text/plain",
      "application/octet-stream",
      "application/json-patch+json",
      "text/plain; note=application/json",
      ""
    ]) {
      expect(bodyKind(type)).toEqual(Option.none())
    }
  })
})

describe("the body each endpoint reads", () => {
  it("is a form where the payload is encoded as URL parameters, JSON for other payloads, none without one", () => {
    const kinds = payloadKinds(Api)
    expect(kinds.get("POST /kyc/sandbox/:sessionId")).toBe("form")
    expect(kinds.get("POST /merchant/orders")).toBe("json")
    expect(kinds.get("PUT /strategy")).toBe("json")
    expect(kinds.has("POST /merchant/orders/:id/pay")).toBe(false)
    expect(kinds.has("GET /health")).toBe(false)
  })
})

describe("database availability", () => {
  const failure = (cause: unknown) => new SqlError.SqlError({ cause, message: "Failed to execute statement" })
  const serverError = (code: string) => Object.assign(new Error("refused"), { severity: "ERROR", code })

  it("network and driver failures, terminated backends and timeouts mean unavailable", () => {
    for (const cause of [
      Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:5432"), { code: "ECONNREFUSED" }),
      new Error("timeout exceeded when trying to connect"),
      new Error("Query read timeout"),
      new Error("Connection terminated unexpectedly"),
      serverError("57P01"),
      serverError("57014"),
      serverError("53300"),
      serverError("08006"),
      serverError("40001")
    ]) {
      expect(isDatabaseUnavailable(failure(cause)), String(cause)).toBe(true)
    }
  })

  it("a statement the server refuses is a fault of ours, not unavailability", () => {
    for (const code of ["22P05", "22021", "23505", "42601", "54001"]) {
      expect(isDatabaseUnavailable(failure(serverError(code))), code).toBe(false)
    }
    expect(isDatabaseUnavailable(new Error("not a SqlError"))).toBe(false)
  })
})
