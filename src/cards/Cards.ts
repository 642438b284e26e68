/**
 * Cards: issuance on identity approval (exactly one per user and per identity document) and the
 * card face its owner reads over `GET /me`. Number and CVV are sealed with AES-256-GCM before
 * they reach the database and opened only to answer their owner; neither is ever logged.
 */
import { randomBytes } from "node:crypto"
import { Clock, Effect, Option, Redacted } from "effect"
import type { Address } from "../chain/Address.js"
import { traced } from "../observability/Traced.js"
import { checkedConstructor } from "../runtime/SchemaClass.js"
import { keyedHash, open as openSealed, Secrets, seal } from "../runtime/Secrets.js"
import { Card } from "./Card.js"
import { CardIssuer } from "./CardIssuer.js"
import { CardRepo, CardRow } from "./CardRepo.js"

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

/** The holder name as printed: trimmed, inner whitespace collapsed. */
const holderName = (fullName: string) => fullName.trim().replace(/\s+/g, " ")

export class Cards extends Effect.Service<Cards>()("app/Cards", {
  effect: Effect.gen(function* () {
    const repo = yield* CardRepo
    const secrets = yield* Secrets
    const issuer = yield* CardIssuer
    const cardKey = secrets.key("cardData")
    const documentKey = secrets.key("documentHash")

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
      const number = Redacted.value(issued.number)
      const inserted = yield* repo.insertIfAbsent({
        id,
        address: request.address,
        issuer: issuer.name,
        issuerRef: issued.issuerRef,
        holder,
        numberSealed: seal(cardKey, number, cardAad(id, "number")),
        cvvSealed: seal(cardKey, Redacted.value(issued.cvv), cardAad(id, "cvv")),
        last4: number.slice(-4),
        expiry: issued.expiry,
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

    return { forOwner, reveal, find, issueOnApproval }
  }),
  dependencies: [CardRepo.Default]
}) {}
