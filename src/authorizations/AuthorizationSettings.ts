/**
 * The card network's settings, read with effect `Config`; a bad value stops start-up naming it.
 *
 * | Variable | Default | Meaning |
 * | `CARD_NETWORK` | `sandbox` | `sandbox` (built in) or `lithic` |
 * | `CARD_AUTHORIZATION_BUDGET` | `1 second` | the longest an authorization may take before the stand-in answer |
 * | `CARD_STAND_IN` | `decline` | the answer past the budget or on an internal failure: `decline` or `approve` |
 * | `CARD_HOLD_TTL` | `7 days` | how long an approved hold lasts unless cleared, reversed or expired sooner |
 * | `LITHIC_ASA_SECRET`, `LITHIC_EVENTS_SECRET` | – | Lithic's `whsec_` secrets (required with `lithic`) |
 * | `LITHIC_API_KEY`, `LITHIC_API_URL` | –, `https://api.lithic.com` | Lithic's API (card issuance) |
 * | `CARD_SANDBOX_NETWORK_URL` | this process's listener | where the sandbox network delivers its messages |
 */
import { Config, Effect, Option, type Redacted } from "effect"
import { durationConfig, httpUrl } from "../runtime/Config.js"

export type NetworkName = "sandbox" | "lithic"

export interface LithicSettings {
  readonly asaSecret: Redacted.Redacted<string>
  readonly eventsSecret: Redacted.Redacted<string>
  readonly apiKey: Redacted.Redacted<string>
  readonly apiUrl: string
}

const required = (name: string) =>
  Config.redacted(name).pipe(
    Config.validate({
      message: `${name} must be set with CARD_NETWORK=lithic`,
      validation: (value) => `${value}` !== ""
    })
  )

const lithicSettings: Config.Config<LithicSettings> = Config.all({
  asaSecret: required("LITHIC_ASA_SECRET"),
  eventsSecret: required("LITHIC_EVENTS_SECRET"),
  apiKey: required("LITHIC_API_KEY"),
  apiUrl: httpUrl("LITHIC_API_URL").pipe(Config.withDefault("https://api.lithic.com"))
})

export const networkName = Config.literal(
  "sandbox",
  "lithic"
)("CARD_NETWORK").pipe(Config.withDefault("sandbox" as NetworkName))

/** The settings of the card network in force; Lithic's are required only when it is. */
export const networkSettings = Effect.gen(function* () {
  const network = yield* networkName
  return {
    network,
    lithic: network === "lithic" ? Option.some(yield* lithicSettings) : Option.none<LithicSettings>(),
    sandboxNetworkUrl: yield* Config.option(httpUrl("CARD_SANDBOX_NETWORK_URL"))
  }
})

export const authorizationSettings = Config.all({
  budget: durationConfig("CARD_AUTHORIZATION_BUDGET", "1 second"),
  standIn: Config.literal("decline", "approve")("CARD_STAND_IN").pipe(Config.withDefault("decline" as const)),
  holdTtl: durationConfig("CARD_HOLD_TTL", "7 days")
})
