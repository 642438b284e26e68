/**
 * A scripted identity provider for tests: no HTTP, no page. A test says what the provider reports
 * for a user's sessions (approve with a name and document, decline, duplicate, abandon, stay
 * pending, or fail); the `Kyc` service learns it by reconciliation while the app polls `GET /me`,
 * exactly as it would from a real provider that sent no webhook.
 *
 *     layer(testServer({ ports: { kycProvider: ScriptedKycProvider.layer() } }))(...)
 */
import { randomBytes } from "node:crypto"
import { Context, Data, Effect, Layer, Option, Redacted, Ref } from "effect"
import type { Address } from "../chain/Address.js"
import { KycProviderFailed, WebhookSignatureInvalid } from "./Api.js"
import { KycProvider, type SessionReport } from "./KycProvider.js"

export type ScriptedOutcome = Data.TaggedEnum<{
  Pending: {}
  Approve: { readonly fullName: string; readonly documentNumber: string }
  Decline: {}
  Duplicate: {}
  Abandon: {}
  /** The provider fails (502 KYC_PROVIDER_ERROR on session creation; reconciliation is skipped). */
  Fail: {}
}>
export const ScriptedOutcome = Data.taggedEnum<ScriptedOutcome>()

interface Session {
  readonly sessionId: string
  readonly address: Address
  readonly returnUrl: string
}

export interface ScriptedKycProviderShape {
  /** What the provider reports for this user's sessions from now on (new ones and open ones). */
  readonly script: (address: Address, outcome: ScriptedOutcome) => Effect.Effect<void>
  /** The sessions opened so far, oldest first. */
  readonly sessions: Effect.Effect<ReadonlyArray<Session>>
}

const failed = new KycProviderFailed({ error: "the identity provider failed (scripted)" })

const reportOf = (outcome: ScriptedOutcome): Effect.Effect<SessionReport, KycProviderFailed> =>
  ScriptedOutcome.$match(outcome, {
    Pending: () => Effect.succeed({ status: "pending", document: Option.none() } as const),
    Approve: ({ documentNumber, fullName }) =>
      Effect.succeed({
        status: "approved",
        document: Option.some({ fullName, documentNumber: Redacted.make(documentNumber) })
      } as const),
    Decline: () => Effect.succeed({ status: "declined", document: Option.none() } as const),
    Duplicate: () => Effect.succeed({ status: "duplicate", document: Option.none() } as const),
    Abandon: () => Effect.succeed({ status: "expired", document: Option.none() } as const),
    Fail: () => Effect.fail(failed)
  })

export class ScriptedKycProvider extends Context.Tag("app/ScriptedKycProvider")<
  ScriptedKycProvider,
  ScriptedKycProviderShape
>() {
  /** The provider (as `KycProvider`, named "scripted") and its script; unscripted users stay pending. */
  static readonly layer = () =>
    Layer.effectContext(
      Effect.gen(function* () {
        const outcomes = yield* Ref.make<ReadonlyMap<string, ScriptedOutcome>>(new Map())
        const sessions = yield* Ref.make<ReadonlyArray<Session>>([])
        const outcomeOf = (address: Address) =>
          Effect.map(Ref.get(outcomes), (all) => all.get(address.toLowerCase()) ?? ScriptedOutcome.Pending())

        const provider = KycProvider.of({
          name: "scripted",
          createSession: ({ address, returnUrl }) =>
            Effect.gen(function* () {
              if ((yield* outcomeOf(address))._tag === "Fail") return yield* failed
              const sessionId = randomBytes(12).toString("base64url")
              yield* Ref.update(sessions, (all) => [...all, { sessionId, address, returnUrl }])
              return { sessionId, url: `https://scripted-kyc.invalid/sessions/${sessionId}` }
            }),
          getSession: (sessionId) =>
            Effect.gen(function* () {
              const session = (yield* Ref.get(sessions)).find((known) => known.sessionId === sessionId)
              if (session === undefined) return yield* failed
              return yield* reportOf(yield* outcomeOf(session.address))
            }),
          verifyWebhook: () =>
            Effect.fail(new WebhookSignatureInvalid({ error: "the scripted identity provider sends no webhooks" }))
        })

        const control = ScriptedKycProvider.of({
          script: (address, outcome) => Ref.update(outcomes, (all) => new Map(all).set(address.toLowerCase(), outcome)),
          sessions: Ref.get(sessions)
        })
        return Context.make(KycProvider, provider).pipe(Context.add(ScriptedKycProvider, control))
      })
    )
}
