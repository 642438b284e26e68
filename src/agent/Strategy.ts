/**
 * The agent strategy: validation and normalisation of a `PUT /strategy` body (pure; the token registry is a
 * function argument). Rules in docs/agent.md, "Strategy".
 */
import { Data, Either } from "effect"
import { normaliseTimeZone } from "../market/TimeZone.js"

export const strategyLimits = Object.freeze({
  maxTokens: 10,
  /** Weights must sum to 1 within this tolerance. */
  weightSumTolerance: 0.001,
  maxWeeklySpendUsd: 100_000,
  defaultTimeZone: "America/New_York"
})

/** A strategy as the client sends it: targets keyed by symbol or token address, in any case. */
export interface StrategyInput {
  readonly targets: Readonly<Record<string, number>>
  readonly weeklySpendUsd: number
  readonly timeZone?: string | undefined
}

/** A valid strategy: targets keyed by registry symbol, a zone name `Intl` knows. */
export interface Strategy {
  readonly targets: Readonly<Record<string, number>>
  readonly weeklySpendUsd: number
  readonly timeZone: string
}

/** A key of `targets` that names no known token (the service answers 400 `UNKNOWN_TOKEN`). */
export class UnknownToken extends Data.TaggedError("UnknownToken")<{
  /** `targets.<key as sent>` */
  readonly field: string
  readonly token: string
  /** `targets.<key>: unknown token "<key>"` */
  readonly message: string
}> {}

/** Any other invalid field (the service answers 400 `BAD_REQUEST`). */
export class StrategyInvalid extends Data.TaggedError("StrategyInvalid")<{
  /** `targets`, `targets.<key as sent>`, `weeklySpendUsd` or `timeZone` */
  readonly field: string
  /** Starts with the field: `weeklySpendUsd: must be between 0 and 100000, got -1` */
  readonly message: string
}> {}

export type StrategyError = UnknownToken | StrategyInvalid

const invalid = (field: string, problem: string) =>
  Either.left(new StrategyInvalid({ field, message: `${field}: ${problem}` }))

/**
 * Checks a strategy and keys its targets by symbol. `resolveSymbol` maps a symbol or token address (any case)
 * to the registry symbol, or undefined for an unknown token. The first problem found is returned, in this
 * order: the number of targets; each target in the order sent (unknown token, weight, the same token named
 * twice); the sum of the weights; `weeklySpendUsd`; `timeZone`.
 */
export const validateStrategy = (
  input: StrategyInput,
  resolveSymbol: (symbolOrAddress: string) => string | undefined
): Either.Either<Strategy, StrategyError> => {
  const { maxTokens, maxWeeklySpendUsd, weightSumTolerance } = strategyLimits
  const entries = Object.entries(input.targets)
  if (entries.length < 1 || entries.length > maxTokens) {
    return invalid("targets", `must name between 1 and ${maxTokens} tokens, got ${entries.length}`)
  }
  const targets: Record<string, number> = {}
  const keyOf = new Map<string, string>()
  for (const [key, weight] of entries) {
    const field = `targets.${key}`
    const symbol = resolveSymbol(key)
    if (symbol === undefined) {
      return Either.left(
        new UnknownToken({ field, token: key, message: `${field}: unknown token ${JSON.stringify(key)}` })
      )
    }
    if (typeof weight !== "number" || !Number.isFinite(weight) || weight <= 0 || weight > 1) {
      return invalid(field, `weight must be greater than 0 and at most 1, got ${String(weight)}`)
    }
    const earlier = keyOf.get(symbol)
    if (earlier !== undefined) return invalid(field, `names ${symbol}, already given as targets.${earlier}`)
    keyOf.set(symbol, key)
    targets[symbol] = weight
  }
  const sum = Object.values(targets).reduce((total, weight) => total + weight, 0)
  if (Math.abs(sum - 1) > weightSumTolerance) {
    return invalid("targets", `weights must sum to 1 (±${weightSumTolerance}), got ${Number(sum.toFixed(6))}`)
  }
  const weekly = input.weeklySpendUsd
  if (typeof weekly !== "number" || !Number.isFinite(weekly) || weekly < 0 || weekly > maxWeeklySpendUsd) {
    return invalid("weeklySpendUsd", `must be between 0 and ${maxWeeklySpendUsd}, got ${String(weekly)}`)
  }
  const timeZone = input.timeZone === undefined ? strategyLimits.defaultTimeZone : normaliseTimeZone(input.timeZone)
  if (timeZone === undefined) {
    return invalid(
      "timeZone",
      `must be an IANA time zone name such as America/New_York, got ${JSON.stringify(input.timeZone)}`
    )
  }
  return Either.right({ targets, weeklySpendUsd: weekly, timeZone })
}
