import { describe, expect, it } from "@effect/vitest"
import { Either } from "effect"
import {
  type StrategyError,
  type StrategyInput,
  StrategyInvalid,
  UnknownToken,
  validateStrategy
} from "../../src/agent/Strategy.js"

const registry = [
  { symbol: "NVDA", address: "0x1111111111111111111111111111111111111111" },
  { symbol: "TSLA", address: "0x2222222222222222222222222222222222222222" },
  ...["AAPL", "MSFT", "SPY", "AMZN", "META", "GOOG", "NFLX", "AMD", "INTC"].map((symbol, i) => ({
    symbol,
    address: `0x${String(i + 3).padStart(40, "0")}`
  }))
]
const resolveSymbol = (key: string) =>
  registry.find((t) => t.symbol.toLowerCase() === key.toLowerCase() || t.address.toLowerCase() === key.toLowerCase())
    ?.symbol

const validate = (input: StrategyInput) => validateStrategy(input, resolveSymbol)

const errorOf = (input: StrategyInput): StrategyError => {
  const result = validate(input)
  if (Either.isRight(result)) throw new Error(`expected an error, got ${JSON.stringify(result.right)}`)
  return result.left
}

const valid = { targets: { NVDA: 0.6, TSLA: 0.4 }, weeklySpendUsd: 140 }

describe("a valid strategy", () => {
  it("is keyed by symbol, with New York as the default time zone", () => {
    expect(
      validate({ targets: { nvda: 0.6, "0x2222222222222222222222222222222222222222": 0.4 }, weeklySpendUsd: 140 })
    ).toEqual(Either.right({ targets: { NVDA: 0.6, TSLA: 0.4 }, weeklySpendUsd: 140, timeZone: "America/New_York" }))
  })

  it("accepts an address in any case, one token of weight 1, the bounds of weeklySpendUsd and a sum within 0.001", () => {
    const upper = "0x2222222222222222222222222222222222222222".toUpperCase().replace("0X", "0x")
    expect(validate({ targets: { [upper]: 1 }, weeklySpendUsd: 0 })).toEqual(
      Either.right({ targets: { TSLA: 1 }, weeklySpendUsd: 0, timeZone: "America/New_York" })
    )
    expect(Either.isRight(validate({ ...valid, weeklySpendUsd: 100_000 }))).toBe(true)
    expect(Either.isRight(validate({ ...valid, targets: { NVDA: 0.6, TSLA: 0.4009 } }))).toBe(true)
    expect(Either.isRight(validate({ ...valid, targets: { NVDA: 0.6, TSLA: 0.3991 } }))).toBe(true)
    const ten = Object.fromEntries(registry.slice(0, 10).map((t) => [t.symbol, 0.1]))
    expect(Either.isRight(validate({ targets: ten, weeklySpendUsd: 1 }))).toBe(true)
  })

  it("normalises the time zone's case and keeps aliases as given", () => {
    const zoneOf = (timeZone: string) => Either.getOrThrow(validate({ ...valid, timeZone })).timeZone
    expect(zoneOf("america/new_york")).toBe("America/New_York")
    expect(zoneOf("Europe/Paris")).toBe("Europe/Paris")
    expect(zoneOf("Asia/Kolkata")).toBe("Asia/Kolkata")
    expect(zoneOf("utc")).toBe("UTC")
  })
})

describe("an invalid strategy names the field", () => {
  const invalid = (input: StrategyInput, field: string, message: string) => {
    const error = errorOf(input)
    expect(error).toBeInstanceOf(StrategyInvalid)
    expect(error).toMatchObject({ _tag: "StrategyInvalid", field, message })
  }

  it("weights summing to 0.9", () => {
    invalid(
      { ...valid, targets: { NVDA: 0.5, TSLA: 0.4 } },
      "targets",
      "targets: weights must sum to 1 (±0.001), got 0.9"
    )
    invalid(
      { ...valid, targets: { NVDA: 0.6, TSLA: 0.402 } },
      "targets",
      "targets: weights must sum to 1 (±0.001), got 1.002"
    )
  })

  it("11 tokens, or none", () => {
    const eleven = Object.fromEntries(registry.map((t) => [t.symbol, 1 / 11]))
    invalid({ ...valid, targets: eleven }, "targets", "targets: must name between 1 and 10 tokens, got 11")
    invalid({ ...valid, targets: {} }, "targets", "targets: must name between 1 and 10 tokens, got 0")
  })

  it("a weight of 0, above 1 or not finite", () => {
    invalid(
      { ...valid, targets: { NVDA: 0, TSLA: 1 } },
      "targets.NVDA",
      "targets.NVDA: weight must be greater than 0 and at most 1, got 0"
    )
    invalid(
      { ...valid, targets: { NVDA: 1.2, TSLA: -0.2 } },
      "targets.NVDA",
      "targets.NVDA: weight must be greater than 0 and at most 1, got 1.2"
    )
    invalid(
      { ...valid, targets: { tsla: Number.NaN } },
      "targets.tsla",
      "targets.tsla: weight must be greater than 0 and at most 1, got NaN"
    )
  })

  it("the same token as symbol and address", () => {
    invalid(
      { ...valid, targets: { NVDA: 0.5, "0x1111111111111111111111111111111111111111": 0.5 } },
      "targets.0x1111111111111111111111111111111111111111",
      "targets.0x1111111111111111111111111111111111111111: names NVDA, already given as targets.NVDA"
    )
    invalid(
      { ...valid, targets: { NVDA: 0.5, nvda: 0.5 } },
      "targets.nvda",
      "targets.nvda: names NVDA, already given as targets.NVDA"
    )
  })

  it("a negative or too large weeklySpendUsd", () => {
    invalid({ ...valid, weeklySpendUsd: -1 }, "weeklySpendUsd", "weeklySpendUsd: must be between 0 and 100000, got -1")
    invalid(
      { ...valid, weeklySpendUsd: 100_000.01 },
      "weeklySpendUsd",
      "weeklySpendUsd: must be between 0 and 100000, got 100000.01"
    )
    invalid(
      { ...valid, weeklySpendUsd: Number.POSITIVE_INFINITY },
      "weeklySpendUsd",
      "weeklySpendUsd: must be between 0 and 100000, got Infinity"
    )
  })

  it("a time zone that is not an IANA name", () => {
    for (const timeZone of ["Mars/Olympus_Mons", "+01:00", "", "America/New York", "EST; DROP"]) {
      invalid(
        { ...valid, timeZone },
        "timeZone",
        `timeZone: must be an IANA time zone name such as America/New_York, got ${JSON.stringify(timeZone)}`
      )
    }
  })
})

describe("an unknown token", () => {
  it("is its own error kind, naming the key as sent", () => {
    const error = errorOf({ ...valid, targets: { NVDA: 0.5, GME: 0.5 } })
    expect(error).toBeInstanceOf(UnknownToken)
    expect(error).toMatchObject({
      _tag: "UnknownToken",
      field: "targets.GME",
      token: "GME",
      message: 'targets.GME: unknown token "GME"'
    })
    const address = "0x9999999999999999999999999999999999999999"
    expect(errorOf({ ...valid, targets: { [address]: 1 } })).toMatchObject({ _tag: "UnknownToken", token: address })
  })

  it("is reported before a bad weight of a later target, and after a bad weight of an earlier one", () => {
    expect(errorOf({ ...valid, targets: { GME: 0.5, NVDA: 0 } })._tag).toBe("UnknownToken")
    expect(errorOf({ ...valid, targets: { NVDA: 0, GME: 0.5 } })._tag).toBe("StrategyInvalid")
  })
})
