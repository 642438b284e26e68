/**
 * What the database holds after an approval, read raw: card number and CVV only as AES-256-GCM
 * ciphertext (that opens to what the owner sees), the identity document only as a keyed hash.
 */
import { createHash } from "node:crypto"
import { expect, layer } from "@effect/vitest"
import { Effect, Option } from "effect"
import { cardAad, documentHash } from "../../src/cards/Cards.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { open as decrypt, deriveKey, parseKey } from "../../src/runtime/Secrets.js"
import { approve, CARD_KEY_HEX, kycEnv, me, openSandboxSession, query, signIn } from "../kyc/helpers.js"
import { testServer } from "../support/TestServer.js"

const master = Option.getOrThrow(parseKey(CARD_KEY_HEX))
const keys = { encryption: deriveKey(master, "cardData"), documentHash: deriveKey(master, "documentHash") }

interface CardRow {
  readonly id: string
  readonly address: string
  readonly holder: string
  readonly numberSealed: Uint8Array
  readonly cvvSealed: Uint8Array
  readonly last4: string
  readonly expiry: string
  readonly documentHash: Uint8Array
  readonly issuerRef: string
}

layer(testServer(kycEnv(), { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "card data at rest",
  (it) => {
    it.effect("the database holds no plaintext card number, CVV or document number", () =>
      Effect.gen(function* () {
        const issued = yield* Effect.forEach(["ZX-9988776655", "QW 1122 3344"], (documentNumber, i) =>
          Effect.gen(function* () {
            const { account, token } = yield* signIn()
            const sessionId = yield* openSandboxSession(token)
            expect((yield* approve(sessionId, `Holder ${i}`, documentNumber)).status).toBe(303)
            const { card } = yield* me(token)
            expect(card.number).toMatch(/^\d{16}$/)
            return { address: account.address as string, card, documentNumber }
          })
        )

        const rows = yield* query<CardRow>("SELECT * FROM cards")
        expect(rows).toHaveLength(2)
        for (const { address, card, documentNumber } of issued) {
          const row = rows.find((r) => r.address === address)!
          const sealedNumber = Buffer.from(row.numberSealed)
          const sealedCvv = Buffer.from(row.cvvSealed)
          // Ciphertext, not the digits: version byte, 96-bit IV, body, 128-bit tag.
          expect(sealedNumber.includes(Buffer.from(card.number))).toBe(false)
          expect(sealedCvv.includes(Buffer.from(card.cvv))).toBe(false)
          expect(sealedNumber.length).toBe(1 + 12 + 16 + 16)
          expect(sealedCvv.length).toBe(1 + 12 + 3 + 16)
          // ... that opens, with the key and this card's binding, to what the owner sees.
          expect(decrypt(keys.encryption, row.numberSealed, cardAad(row.id, "number"))).toEqual(
            Option.some(card.number)
          )
          expect(decrypt(keys.encryption, row.cvvSealed, cardAad(row.id, "cvv"))).toEqual(Option.some(card.cvv))
          // Swapped between fields or cards it does not open.
          expect(decrypt(keys.encryption, row.numberSealed, cardAad(row.id, "cvv"))).toEqual(Option.none())
          // Only the last four digits are kept in the clear, for display.
          expect(row.last4).toBe(card.number.slice(-4))
          for (const text of [row.id, row.holder, row.expiry, row.issuerRef]) {
            expect(text).not.toContain(card.number)
            expect(text).not.toBe(card.cvv)
          }
          // The document is a keyed hash of its normalised number (not a plain digest).
          expect(Buffer.from(row.documentHash)).toEqual(Buffer.from(documentHash(keys.documentHash, documentNumber)))
          const plain = createHash("sha256")
            .update(documentNumber.replace(/[^A-Z0-9]/gi, "").toUpperCase())
            .digest()
          expect(Buffer.from(row.documentHash).equals(plain)).toBe(false)
        }
        // Every IV is fresh.
        const ivs = rows
          .flatMap((r) => [r.numberSealed, r.cvvSealed])
          .map((b) => Buffer.from(b).subarray(1, 13).toString("hex"))
        expect(new Set(ivs).size).toBe(ivs.length)

        // No table, in any column, holds a number or a document number in the clear.
        const tables = yield* query<{ tableName: string }>(
          "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'"
        )
        expect(tables.map((t) => t.tableName)).toEqual(expect.arrayContaining(["cards", "kyc_sandbox_sessions"]))
        for (const { tableName } of tables) {
          const dump = yield* query<{ row: string }>(`SELECT row_to_json(t)::text AS row FROM "${tableName}" t`)
          for (const { row } of dump) {
            for (const { card, documentNumber } of issued) {
              expect(row, tableName).not.toContain(card.number)
              expect(row.toUpperCase(), tableName).not.toContain(documentNumber.toUpperCase())
              expect(row.toUpperCase(), tableName).not.toContain(
                documentNumber.replace(/[^A-Z0-9]/gi, "").toUpperCase()
              )
            }
          }
        }
      })
    )
  }
)
