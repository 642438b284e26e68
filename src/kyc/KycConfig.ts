/**
 * Identity-check configuration, read with effect `Config`. A bad value stops start-up with a
 * message naming the variable.
 *
 * | Variable | Default | Meaning |
 * | `KYC_PROVIDER` | `sandbox` | `sandbox` (built-in test provider) or `didit` |
 * | `KYC_SANDBOX_WEBHOOK_URL` | this process's own listener | where the sandbox delivers its webhooks |
 * | `DIDIT_API_KEY`, `DIDIT_WEBHOOK_SECRET`, `DIDIT_WORKFLOW_ID` | - | required when `KYC_PROVIDER=didit` |
 * | `DIDIT_BASE_URL` | `https://verification.didit.me` | Didit's API base |
 */
import { Config, Context, Effect, Layer, Option, type Redacted } from "effect"
import { AppConfig, httpUrl } from "../runtime/Config.js"

/** How far a webhook's signed timestamp may be from now (both ways) and still be accepted. */
export const WEBHOOK_TOLERANCE_MS = 5 * 60 * 1000

/** The built-in providers `KYC_PROVIDER` chooses from; another provider is another `KycProvider` Layer. */
export type ProviderName = "sandbox" | "didit"
const PROVIDER_NAMES: ReadonlyArray<ProviderName> = ["sandbox", "didit"]

const DIDIT_DEFAULT_BASE_URL = "https://verification.didit.me"

export interface DiditSettings {
  readonly apiKey: Redacted.Redacted<string>
  readonly webhookSecret: Redacted.Redacted<string>
  readonly workflowId: string
  readonly baseUrl: string
}

export interface KycSettings {
  readonly provider: ProviderName
  /** Public base URL of this service, without a trailing slash. */
  readonly apiUrl: string
  readonly sandboxWebhookUrl: Option.Option<string>
  readonly didit: Option.Option<DiditSettings>
}

const nonEmpty = (name: string) =>
  Config.redacted(name).pipe(
    Config.validate({ message: `Expected ${name} to be non-empty`, validation: (value) => `${value}` !== "" })
  )

const diditSettings: Config.Config<DiditSettings> = Config.all({
  apiKey: nonEmpty("DIDIT_API_KEY"),
  webhookSecret: nonEmpty("DIDIT_WEBHOOK_SECRET"),
  workflowId: Config.string("DIDIT_WORKFLOW_ID").pipe(
    Config.validate({ message: "Expected DIDIT_WORKFLOW_ID to be non-empty", validation: (id) => id.trim() !== "" })
  ),
  baseUrl: httpUrl("DIDIT_BASE_URL").pipe(Config.withDefault(DIDIT_DEFAULT_BASE_URL))
})

const kycSettings = Effect.gen(function* () {
  const { apiUrl } = yield* AppConfig
  const provider = yield* Config.literal(...PROVIDER_NAMES)("KYC_PROVIDER").pipe(
    Config.withDefault("sandbox" as ProviderName)
  )
  const sandboxWebhookUrl = yield* Config.option(httpUrl("KYC_SANDBOX_WEBHOOK_URL"))
  // Didit's settings are required only when it is the active provider.
  const didit = provider === "didit" ? Option.some(yield* diditSettings) : Option.none()
  return { provider, apiUrl, sandboxWebhookUrl, didit } satisfies KycSettings
})

export class KycConfig extends Context.Tag("app/KycConfig")<KycConfig, KycSettings>() {
  static readonly layer = Layer.effect(KycConfig, kycSettings)
}
