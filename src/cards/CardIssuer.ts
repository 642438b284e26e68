/**
 * The card-issuer port and the local issuer used by default.
 *
 * The local issuer makes an app-internal card face, not a payment-network card: a 16-digit,
 * Luhn-valid number in the non-network range 9406 (ISO/IEC 7812 major industry identifier 9),
 * an expiry three years ahead (`MM/YY`, UTC) and a 3-digit CVV, all from a CSPRNG. A production
 * issuer is another Layer for `CardIssuer`; a failure there is a defect (the identity-provider
 * webhook then answers 500 and is retried).
 */
import { randomInt, randomUUID } from "node:crypto"
import { Context, Effect, Layer, Redacted, Ref } from "effect"
import type { Address } from "../chain/Address.js"
import { withCheckDigit } from "./Luhn.js"

export interface IssuedCard {
  readonly number: Redacted.Redacted<string>
  readonly cvv: Redacted.Redacted<string>
  /** `MM/YY` */
  readonly expiry: string
  /** The issuer's own id for the card. */
  readonly issuerRef: string
}

export interface CardIssuerShape {
  readonly name: string
  readonly issue: (request: {
    readonly address: Address
    readonly holder: string
    readonly now: number
  }) => Effect.Effect<IssuedCard>
  /** Closes a card the holder replaced (a lost card): the issuer's network then refuses it too. */
  readonly retire: (issuerRef: string) => Effect.Effect<void>
}

export class CardIssuer extends Context.Tag("app/CardIssuer")<CardIssuer, CardIssuerShape>() {}

/** Non-network prefix of the local issuer's numbers. */
const LOCAL_PREFIX = "9406"
const LOCAL_NUMBER_LENGTH = 16
const CARD_VALIDITY_YEARS = 3

const randomDigits = (count: number): string => Array.from({ length: count }, () => String(randomInt(10))).join("")

/** A fresh Luhn-valid number: prefix, random body, check digit. */
export const localCardNumber = (prefix = LOCAL_PREFIX, length = LOCAL_NUMBER_LENGTH): string =>
  withCheckDigit(`${prefix}${randomDigits(length - prefix.length - 1)}`)

/** `MM/YY` of the month `years` after `now` (UTC). */
export const expiryAfter = (now: number, years = CARD_VALIDITY_YEARS): string => {
  const date = new Date(now)
  const month = String(date.getUTCMonth() + 1).padStart(2, "0")
  const year = String((date.getUTCFullYear() + years) % 100).padStart(2, "0")
  return `${month}/${year}`
}

export const LocalCardIssuer = Layer.succeed(
  CardIssuer,
  CardIssuer.of({
    name: "local",
    issue: ({ now }) =>
      Effect.sync(() => ({
        number: Redacted.make(localCardNumber()),
        cvv: Redacted.make(randomDigits(3)),
        expiry: expiryAfter(now),
        // The sandbox card network names cards by this token, as a processor would (a UUID).
        issuerRef: randomUUID()
      })),
    // The sandbox network reads the card table itself: a replaced face declines card_canceled.
    retire: () => Effect.void
  })
)

/** A card face as a test wants it issued. */
export interface CardFace {
  readonly number: string
  readonly cvv: string
  readonly expiry: string
}

/** A test issuer that hands out the given faces in order (and dies past them: the test asked too much). */
export const FixedCardIssuer = (faces: ReadonlyArray<CardFace>) =>
  Layer.effect(
    CardIssuer,
    Effect.map(Ref.make(0), (issued) =>
      CardIssuer.of({
        name: "fixed",
        issue: () =>
          Effect.gen(function* () {
            const face = faces[yield* Ref.getAndUpdate(issued, (n) => n + 1)]
            if (face === undefined) return yield* Effect.dieMessage(`FixedCardIssuer has only ${faces.length} faces`)
            return {
              number: Redacted.make(face.number),
              cvv: Redacted.make(face.cvv),
              expiry: face.expiry,
              issuerRef: `fixed_${randomUUID()}`
            }
          }),
        retire: () => Effect.void
      })
    )
  )
