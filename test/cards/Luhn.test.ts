import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { checkDigit, isLuhnValid, withCheckDigit } from "../../src/cards/Luhn.js"

const digits = (min: number, max: number) =>
  FastCheck.array(FastCheck.integer({ min: 0, max: 9 }), { minLength: min, maxLength: max }).map((ds) => ds.join(""))

describe("Luhn", () => {
  it("agrees with published test numbers", () => {
    for (const valid of [
      "4242424242424242",
      "4000056655665556",
      "5555555555554444",
      "2223003122003222",
      "378282246310005",
      "9406000000000019",
      "9406000000000027"
    ]) {
      expect(isLuhnValid(valid), valid).toBe(true)
    }
    for (const invalid of ["4242424242424241", "9406000000000018", "1234567812345678", "", "7", "12a4", "4242 4242"]) {
      expect(isLuhnValid(invalid), invalid).toBe(false)
    }
    expect(checkDigit("940600000000001")).toBe(9)
    expect(checkDigit("424242424242424")).toBe(2)
    expect(() => checkDigit("12x")).toThrow()
  })

  it.prop("a completed number is always valid", [digits(1, 30)], ([partial]) => {
    expect(isLuhnValid(withCheckDigit(partial))).toBe(true)
  })

  it.prop(
    "changing any one digit breaks it",
    [digits(11, 18), FastCheck.nat(), FastCheck.integer({ min: 1, max: 9 })],
    ([partial, at, delta]) => {
      const number = withCheckDigit(partial)
      const i = at % number.length
      const changed = `${number.slice(0, i)}${(Number(number[i]) + delta) % 10}${number.slice(i + 1)}`
      expect(isLuhnValid(changed)).toBe(false)
    }
  )

  it.prop(
    "swapping two adjacent different digits (other than 0/9) breaks it",
    [digits(11, 18), FastCheck.nat()],
    ([partial, at]) => {
      const number = withCheckDigit(partial)
      const i = at % (number.length - 1)
      const [a, b] = [number[i]!, number[i + 1]!]
      FastCheck.pre(a !== b && !((a === "0" && b === "9") || (a === "9" && b === "0")))
      const swapped = `${number.slice(0, i)}${b}${a}${number.slice(i + 2)}`
      expect(isLuhnValid(swapped)).toBe(false)
    }
  )
})
