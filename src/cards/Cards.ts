/**
 * Cards: issuance on identity approval (exactly one per user and per identity document) and the
 * card face its owner reads over `GET /me`. Number and CVV are sealed with AES-256-GCM before
 * they reach the database and opened only to answer their owner; neither is ever logged.
 */
import { randomBytes, timingSafeEqual } from "node:crypto"
import { Clock, Effect, Option, Redacted } from "effect"
import type { Address } from "../chain/Address.js"
import { traced } from "../observability/Traced.js"
import { checkedConstructor } from "../runtime/SchemaClass.js"
import { keyedHash, open as openSealed, Secrets, seal } from "../runtime/Secrets.js"
import { CardControls, CardNotFound, type ControlsUpdate } from "./Api.js"
import { Card } from "./Card.js"
import { CardIssuer } from "./CardIssuer.js"
import { CardRepo, CardRow, type ControlsRow, type NewFace } from "./CardRepo.js"

/** A card's stored row, as `reveal` takes it from whoever read the owner's standing in one statement. */
export { CardRow }

/** What an approval did: a new card, the user's existing card, or none because the document holds one. */
export type IssueOutcome = "issued" | "already-issued" | "duplicate"

const makeCard = checkedConstructor(Card)

/** Additional authenticated data: binds a sealed value to its card and field. */
export const cardAad = (cardId: string, field: "number" | "cvv") => `card:${cardId}:${field}`

/**
 * A document number in the form documents are told apart by, for one card per document: upper case,
 * compatibility-normalised, separators (spaces, dashes, dots, slashes) removed.
 */
export const normalizeDocumentNumber = (text: string): string =>
  text
    .normalize("NFKC")
    .toUpperCase()
    .replace(/[^\p{L}\p{N}]/gu, "")

/** HMAC of the normalised document number: equal documents, equal hashes; no way back. */
export const documentHash = (key: Uint8Array, documentNumber: string) =>
  keyedHash(key, normalizeDocumentNumber(documentNumber))

/** HMAC of a card number: finds the card a terminal's number names, without the number at rest. */
export const numberHash = (key: Uint8Array, number: string) => keyedHash(key, number)

const MICROS_PER_USD = 1_000_000

const microsOf = (usd: number | null): bigint | null => (usd === null ? null : BigInt(Math.round(usd * 100)) * 10_000n)
const usdOf = (micros: bigint | null): number | null => (micros === null ? null : Number(micros) / MICROS_PER_USD)

const controlsOf = (row: ControlsRow) =>
  new CardControls({
    frozen: row.frozen || row.owedMicros > 0n,
    frozenReason: row.frozen ? "holder" : row.owedMicros > 0n ? "amount_owed" : null,
    owedUsd: Number(row.owedMicros) / MICROS_PER_USD,
    perTransactionUsd: usdOf(row.perTransactionMicros),
    dailyUsd: usdOf(row.dailyMicros),
    monthlyUsd: usdOf(row.monthlyMicros),
    blockedMcc: row.blockedMcc
  })

/** Equal strings, compared in constant time for equal lengths. */
const sameSecret = (a: string, b: string) =>
  a.length === b.length && timingSafeEqual(Buffer.from(a, "utf8"), Buffer.from(b, "utf8"))

/** The holder name as printed: trimmed, inner whitespace collapsed. */
const holderName = (fullName: string) => fullName.trim().replace(/\s+/g, " ")

export class Cards extends Effect.Service<Cards>()("app/Cards", {
  effect: Effect.gen(function* () {
    const repo = yield* CardRepo
    const secrets = yield* Secrets
    const issuer = yield* CardIssuer
    const cardKey = secrets.key("cardData")
    const documentKey = secrets.key("documentHash")
    const numberKey = secrets.key("cardNumberHash")
    const noCard = new CardNotFound({ error: "no card is issued to this account: pass the identity check first" })

    /** A face from the issuer, sealed for the card `id`. */
    const sealFace = (id: string, issued: Effect.Effect.Success<ReturnType<typeof issuer.issue>>): NewFace => {
      const number = Redacted.value(issued.number)
      return {
        issuerRef: issued.issuerRef,
        numberSealed: seal(cardKey, number, cardAad(id, "number")),
        cvvSealed: seal(cardKey, Redacted.value(issued.cvv), cardAad(id, "cvv")),
        last4: number.slice(-4),
        expiry: issued.expiry,
        numberHash: numberHash(numberKey, number)
      }
    }

    // Cards issued before numbers were hashed get their hash now (a sealed number opens only here).
    for (const row of yield* repo.withoutNumberHash().pipe(Effect.orDie)) {
      const number = openSealed(cardKey, row.numberSealed, cardAad(row.id, "number"))
      if (Option.isSome(number))
        yield* repo.setNumberHash(row.id, row.numberSealed, numberHash(numberKey, number.value))
    }

    const open = (row: CardRow): Card => {
      const reveal = (sealed: Uint8Array, field: "number" | "cvv") =>
        Option.getOrThrowWith(
          openSealed(cardKey, sealed, cardAad(row.id, field)),
          () =>
            new Error(`card ${row.id}: the ${field} does not decrypt (is CARD_DATA_KEY the key it was sealed with?)`)
        )
      return makeCard({
        address: row.address,
        holder: row.holder,
        number: reveal(row.numberSealed, "number"),
        expiry: row.expiry,
        cvv: reveal(row.cvvSealed, "cvv"),
        createdAt: row.createdAt.getTime()
      })
    }

    /** The user's card, opened for its owner; none before approval. */
    /** A card's row opened for its owner (the row read by whoever reads the owner's standing). */
    const reveal = (row: CardRow) =>
      Effect.zipRight(Effect.annotateCurrentSpan("card.id", row.id), Effect.orDie(Effect.try(() => open(row))))

    const forOwner = traced("Cards.forOwner")(function* (address: Address) {
      const row = yield* repo.findByAddress(address)
      return Option.isNone(row) ? Option.none<Card>() : Option.some(yield* reveal(row.value))
    })

    /**
     * Issues the user's card for an approved identity document. Run it inside the caller's
     * transaction, holding the lock on the user's identity-check row; the unique constraints on
     * user and document hash are the last word under any concurrency.
     */
    const issueOnApproval = traced("Cards.issueOnApproval")(function* (request: {
      readonly address: Address
      readonly fullName: string
      readonly documentNumber: Redacted.Redacted<string>
    }) {
      yield* Effect.annotateCurrentSpan("user.address", request.address)
      const hash = documentHash(documentKey, Redacted.value(request.documentNumber))
      const owner = yield* repo.holderOfDocument(hash)
      if (owner !== undefined) return owner === request.address ? "already-issued" : ("duplicate" as IssueOutcome)
      if (yield* repo.hasCard(request.address)) return "already-issued" as IssueOutcome
      const now = yield* Clock.currentTimeMillis
      const holder = holderName(request.fullName)
      const issued = yield* issuer.issue({ address: request.address, holder, now })
      const id = randomBytes(16).toString("hex")
      const inserted = yield* repo.insertIfAbsent({
        id,
        address: request.address,
        issuer: issuer.name,
        holder,
        ...sealFace(id, issued),
        documentHash: hash,
        createdAt: new Date(now)
      })
      if (inserted) {
        yield* Effect.annotateCurrentSpan("card.id", id)
        yield* Effect.logInfo("card issued").pipe(
          Effect.annotateLogs({ "user.address": request.address, "card.id": id })
        )
        return "issued" as IssueOutcome
      }
      // Another transaction inserted first: either this user's card or this document's.
      return (yield* repo.hasCard(request.address)) ? "already-issued" : ("duplicate" as IssueOutcome)
    })

    /** A card by its holder's address or its id, without opening its face. */
    const find = traced("Cards.find")(function* (addressOrId: string) {
      return yield* repo.findRef(addressOrId)
    })

    const controls = traced("Cards.controls")(function* (address: Address) {
      const row = yield* repo.controls(address)
      if (Option.isNone(row)) return yield* noCard
      return controlsOf(row.value)
    })

    /** Sets the fields given, keeps the others. */
    const updateControls = traced("Cards.updateControls")(function* (address: Address, update: ControlsUpdate) {
      const current = yield* repo.controls(address)
      if (Option.isNone(current)) return yield* noCard
      const next: ControlsRow = {
        frozen: update.frozen ?? current.value.frozen,
        owedMicros: current.value.owedMicros,
        perTransactionMicros:
          update.perTransactionUsd === undefined
            ? current.value.perTransactionMicros
            : microsOf(update.perTransactionUsd),
        dailyMicros: update.dailyUsd === undefined ? current.value.dailyMicros : microsOf(update.dailyUsd),
        monthlyMicros: update.monthlyUsd === undefined ? current.value.monthlyMicros : microsOf(update.monthlyUsd),
        blockedMcc: update.blockedMcc === undefined ? current.value.blockedMcc : [...new Set(update.blockedMcc)].sort()
      }
      const stored = yield* repo.updateControls({ address, controls: next })
      if (Option.isNone(stored)) return yield* noCard
      yield* Effect.logInfo("card controls changed").pipe(Effect.annotateLogs({ "user.address": address }))
      return controlsOf(stored.value)
    })

    /**
     * A new number, expiry and CVV for a lost card: the old face is kept as replaced (it then declines
     * card_canceled) and closed at the issuer.
     */
    const replace = traced("Cards.replace")(function* (address: Address) {
      const card = yield* repo.findByAddress(address)
      if (Option.isNone(card)) return yield* noCard
      const now = yield* Clock.currentTimeMillis
      const issued = yield* issuer.issue({ address, holder: card.value.holder, now })
      const oldRef = yield* repo.replaceFace(address, sealFace(card.value.id, issued), new Date(now))
      if (oldRef === undefined) return yield* noCard
      yield* issuer.retire(oldRef)
      yield* Effect.logInfo("card replaced").pipe(
        Effect.annotateLogs({ "user.address": address, "card.id": card.value.id })
      )
      const replaced = yield* repo.findByAddress(address)
      if (Option.isNone(replaced)) return yield* noCard
      return yield* reveal(replaced.value)
    })

    /**
     * The face a terminal's number names, when its expiry and CVV match it: the network's check
     * before it asks the issuer. The card's token for the network, and whether it was replaced.
     */
    const faceForSwipe = (swipe: { readonly number: string; readonly expiry: string; readonly cvv: string }) =>
      Effect.gen(function* () {
        const face = yield* repo.faceByNumberHash(numberHash(numberKey, swipe.number))
        if (Option.isNone(face) || face.value.expiry !== swipe.expiry) return Option.none()
        const cvv = openSealed(cardKey, face.value.cvvSealed, cardAad(face.value.cardId, "cvv"))
        if (Option.isNone(cvv) || !sameSecret(cvv.value, swipe.cvv)) return Option.none()
        return Option.some({ token: face.value.issuerRef, lastFour: face.value.last4, replaced: face.value.replaced })
      })

    return { forOwner, reveal, find, issueOnApproval, controls, updateControls, replace, faceForSwipe }
  }),
  dependencies: [CardRepo.Default]
}) {}
