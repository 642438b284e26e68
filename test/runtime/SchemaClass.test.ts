import { describe, expect, it } from "@effect/vitest"
import { Schema } from "effect"
import { checkedConstructor } from "../../src/runtime/SchemaClass.js"

class Payer extends Schema.Class<Payer>("Payer")({
  address: Schema.String.pipe(Schema.pattern(/^0x[0-9a-f]{40}$/)),
  since: Schema.DateFromNumber
}) {}

const makePayer = checkedConstructor(Payer)

describe("checkedConstructor", () => {
  it("makes the class's instance from valid props", () => {
    const payer = makePayer({ address: `0x${"a".repeat(40)}`, since: new Date(5) })
    expect(payer).toBeInstanceOf(Payer)
    expect(payer).toEqual(new Payer({ address: `0x${"a".repeat(40)}`, since: new Date(5) }))
  })

  it("refuses what the class's own constructor refuses", () => {
    const invalid = { address: "0xnot-an-address", since: new Date(5) }
    expect(() => new Payer(invalid)).toThrow()
    expect(() => makePayer(invalid)).toThrow(/pattern|Expected/)
    expect(() => makePayer({ address: `0x${"a".repeat(40)}`, since: "yesterday" as unknown as Date })).toThrow()
  })
})
