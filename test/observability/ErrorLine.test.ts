import { describe, expect, it } from "@effect/vitest"
import { describeError } from "../../src/observability/ErrorLine.js"

describe("describeError", () => {
  it("follows causes and spells out every error of an AggregateError", () => {
    const refused = (address: string) => new Error(`connect ECONNREFUSED ${address}`)
    const aggregate = new AggregateError([refused("::1:5432"), refused("127.0.0.1:5432")], "")
    expect(describeError(new Error("PgClient: Failed to connect", { cause: aggregate }))).toBe(
      "PgClient: Failed to connect: connect ECONNREFUSED ::1:5432; connect ECONNREFUSED 127.0.0.1:5432"
    )
    // a cause the message already quotes is not repeated; an empty message gives way to its cause
    expect(describeError(new Error("spawn x EACCES", { cause: new Error("EACCES") }))).toBe("spawn x EACCES")
    expect(describeError(new Error("", { cause: "no route" }))).toBe("no route")
    expect(describeError({ toString: () => "odd" })).toBe("odd")
  })
})
