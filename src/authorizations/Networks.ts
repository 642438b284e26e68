/**
 * The two card networks `CARD_NETWORK` chooses from, both on Lithic's wire format: the built-in
 * sandbox network (its signing secret generated into DATA_DIR, or `CARD_SANDBOX_SECRET`) and Lithic
 * itself (its ASA and Events API secrets). Each verifies the Standard Webhooks signature with its
 * secrets, then reads the message.
 */
import { randomBytes } from "node:crypto"
import { type ConfigError, Effect, Either, Layer, Option, Redacted } from "effect"
import { type SecretName, Secrets } from "../runtime/Secrets.js"
import { networkSettings } from "./AuthorizationSettings.js"
import { CardNetwork, NetworkMessageMalformed, NetworkSignatureInvalid } from "./CardNetwork.js"
import { asaResponse, readMessage } from "./LithicWire.js"
import { SandboxNetworkKey } from "./SandboxNetwork.js"
import { formatSecret, secretKey, verify } from "./StandardWebhooks.js"

/** The sandbox network's signing secret, in the scheme's `whsec_` format. */
export const SANDBOX_NETWORK_SECRET: SecretName = {
  variable: "CARD_SANDBOX_SECRET",
  file: "card-sandbox.secret",
  generate: () => formatSecret(randomBytes(24))
}

/** A network on Lithic's wire format that accepts messages signed with any of `keys`. */
const lithicWire = (name: string, keys: ReadonlyArray<Buffer>) =>
  CardNetwork.of({
    name,
    receive: (body, headers, nowMs) => {
      const verdicts = keys.map((key) => verify({ key, body, headers, nowMs }))
      const accepted = verdicts.find((verdict) => verdict.valid)
      if (accepted === undefined || !accepted.valid) {
        const why = verdicts.some((verdict) => !verdict.valid && verdict.why === "stale")
          ? "its timestamp is more than 5 minutes from now"
          : verdicts.some((verdict) => !verdict.valid && verdict.why === "bad-signature")
            ? "no signature matches the body"
            : "the webhook-id, webhook-timestamp or webhook-signature header is missing"
        return Either.left(new NetworkSignatureInvalid({ reason: why }))
      }
      return Either.mapLeft(
        readMessage(Buffer.from(body).toString("utf8"), accepted.messageId),
        (reason) => new NetworkMessageMalformed({ reason })
      )
    },
    answer: asaResponse
  })

const keyOf = (variable: string, secret: Redacted.Redacted<string>) => {
  const key = secretKey(Redacted.value(secret))
  return key === undefined
    ? Effect.dieMessage(`${variable} must be a Standard Webhooks secret: whsec_ followed by base64`)
    : Effect.succeed(key)
}

/** The sandbox network: the port, and the key its terminal signs with. */
const SandboxCardNetwork = Layer.unwrapEffect(
  Effect.gen(function* () {
    const secrets = yield* Secrets
    const key = yield* keyOf(SANDBOX_NETWORK_SECRET.variable, yield* secrets.secret(SANDBOX_NETWORK_SECRET))
    yield* Effect.logWarning(
      "cards use the built-in SANDBOX network: anyone can make card payments with a card's details. " +
        "Set CARD_NETWORK=lithic (or another real processor) in production."
    )
    return Layer.merge(
      Layer.succeed(CardNetwork, lithicWire("sandbox", [key])),
      Layer.succeed(SandboxNetworkKey, Option.some(key))
    )
  })
)

/** Lithic: ASA requests signed with the ASA secret, transaction events with the event subscription's. */
const LithicCardNetwork = Layer.unwrapEffect(
  Effect.gen(function* () {
    const { lithic } = yield* networkSettings
    const settings = Option.getOrThrow(lithic)
    const asa = yield* keyOf("LITHIC_ASA_SECRET", settings.asaSecret)
    const events = yield* keyOf("LITHIC_EVENTS_SECRET", settings.eventsSecret)
    return Layer.merge(
      Layer.succeed(CardNetwork, lithicWire("lithic", [asa, events])),
      Layer.succeed(SandboxNetworkKey, Option.none())
    )
  })
)

/** `CARD_NETWORK`: the built-in sandbox network (default) or Lithic. */
export const ConfiguredCardNetwork = Layer.unwrapEffect(
  Effect.map(
    networkSettings,
    ({ network }): Layer.Layer<CardNetwork | SandboxNetworkKey, ConfigError.ConfigError, Secrets> =>
      network === "lithic" ? LithicCardNetwork : SandboxCardNetwork
  )
)
