/**
 * Card data at rest: AES-256-GCM with a random 96-bit IV per value, the keyed hash of identity
 * document numbers, and the loading of the key.
 *
 * `CARD_DATA_KEY` holds 32 bytes (64 hex characters or base64). Two sub-keys are derived from it
 * with HKDF-SHA256, one to encrypt card numbers and CVVs, one to hash document numbers, so neither
 * use can be turned against the other. Without `CARD_DATA_KEY` a development key is generated once
 * into `<DATA_DIR>/card-data.key` (mode 0600) and a warning says so.
 *
 * Stored ciphertext layout: `0x01 | iv (12) | ciphertext | tag (16)`. The additional authenticated
 * data names the row and the field, so a ciphertext copied to another row or column fails to open.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from "node:crypto"
import { linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs"
import path from "node:path"
import { Config, ConfigError, Context, Effect, Either, Layer, Option, Redacted } from "effect"
import { AppConfig } from "../Config.js"

export const KEY_BYTES = 32
const IV_BYTES = 12
const TAG_BYTES = 16
const VERSION = 0x01

/** Reads 32 bytes given as 64 hex characters or as base64 / base64url. */
export const parseKey = (text: string): Option.Option<Uint8Array> => {
  const trimmed = text.trim()
  if (/^[0-9a-fA-F]{64}$/.test(trimmed)) return Option.some(new Uint8Array(Buffer.from(trimmed, "hex")))
  if (/^[A-Za-z0-9+/_-]{43}={0,1}$/.test(trimmed)) {
    const bytes = Buffer.from(trimmed.replace(/-/g, "+").replace(/_/g, "/"), "base64")
    if (bytes.length === KEY_BYTES) return Option.some(new Uint8Array(bytes))
  }
  return Option.none()
}

/** The two working keys derived from the master key. */
export interface CardKeys {
  readonly encryption: Uint8Array
  readonly documentHash: Uint8Array
}

export const deriveKeys = (master: Uint8Array): CardKeys => {
  const derive = (info: string) =>
    new Uint8Array(hkdfSync("sha256", master, new Uint8Array(0), Buffer.from(info, "utf8"), KEY_BYTES))
  return { encryption: derive("card-data/aes-256-gcm/v1"), documentHash: derive("kyc/document-hash/v1") }
}

/** Encrypts `plaintext` under `key`, binding it to `aad` (e.g. "card:<id>:number"). */
export const encrypt = (key: Uint8Array, plaintext: string, aad: string): Uint8Array => {
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv("aes-256-gcm", key, iv)
  cipher.setAAD(Buffer.from(aad, "utf8"))
  const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
  return new Uint8Array(Buffer.concat([Buffer.of(VERSION), iv, body, cipher.getAuthTag()]))
}

/** Opens a value sealed by `encrypt`; none when the key, the aad or any byte is wrong. */
export const decrypt = (key: Uint8Array, sealed: Uint8Array, aad: string): Option.Option<string> => {
  if (sealed.length < 1 + IV_BYTES + TAG_BYTES || sealed[0] !== VERSION) return Option.none()
  const bytes = Buffer.from(sealed)
  const iv = bytes.subarray(1, 1 + IV_BYTES)
  const tag = bytes.subarray(bytes.length - TAG_BYTES)
  const body = bytes.subarray(1 + IV_BYTES, bytes.length - TAG_BYTES)
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, iv)
    decipher.setAAD(Buffer.from(aad, "utf8"))
    decipher.setAuthTag(tag)
    return Option.some(Buffer.concat([decipher.update(body), decipher.final()]).toString("utf8"))
  } catch {
    return Option.none()
  }
}

/** Upper case, compatibility-normalised, separators (spaces, dashes, dots, slashes) removed. */
export const normalizeDocumentNumber = (text: string): string =>
  text
    .normalize("NFKC")
    .toUpperCase()
    .replace(/[^\p{L}\p{N}]/gu, "")

/** HMAC-SHA256 of the normalised document number: equal documents, equal hashes; no way back. */
export const documentHash = (key: Uint8Array, documentNumber: string): Uint8Array =>
  new Uint8Array(createHmac("sha256", key).update(normalizeDocumentNumber(documentNumber), "utf8").digest())

/**
 * Reads `file`, or creates it (mode 0600) with `generate()` when absent. Creation is atomic
 * (write a temporary file, then hard-link it into place), so concurrent starts agree on one value.
 */
export const loadOrCreateSecretFile = (file: string, generate: () => string): { text: string; created: boolean } => {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
  let created = false
  try {
    return { text: readFileSync(file, "utf8"), created }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error
  }
  const temporary = `${file}.${randomBytes(6).toString("hex")}.tmp`
  writeFileSync(temporary, `${generate()}\n`, { mode: 0o600, flag: "wx" })
  try {
    linkSync(temporary, file)
    created = true
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") throw error
  } finally {
    unlinkSync(temporary)
  }
  return { text: readFileSync(file, "utf8"), created }
}

export const CARD_KEY_FILE = "card-data.key"

/** The working keys for card data and document hashes. */
export class CardDataKey extends Context.Tag("app/CardDataKey")<CardDataKey, CardKeys>() {
  /** From `CARD_DATA_KEY`, else from (or into) `<DATA_DIR>/card-data.key` with a warning. */
  static readonly layer = Layer.effect(
    CardDataKey,
    Effect.gen(function* () {
      const given = yield* Config.option(Config.redacted("CARD_DATA_KEY"))
      if (Option.isSome(given)) {
        const key = parseKey(Redacted.value(given.value))
        if (Option.isNone(key)) {
          return yield* Effect.fail(
            ConfigError.InvalidData(
              ["CARD_DATA_KEY"],
              "Expected CARD_DATA_KEY to be 32 bytes written as 64 hex characters or as base64"
            )
          )
        }
        return deriveKeys(key.value)
      }
      const { dataDir } = yield* AppConfig
      const file = path.resolve(dataDir, CARD_KEY_FILE)
      const loaded = yield* Effect.try({
        try: () => loadOrCreateSecretFile(file, () => randomBytes(KEY_BYTES).toString("hex")),
        catch: (error) => new Error(`cannot read or create the development card key ${file}: ${String(error)}`)
      }).pipe(Effect.orDie)
      const key = parseKey(loaded.text)
      if (Option.isNone(key)) {
        return yield* Effect.dieMessage(`${file} does not hold a 32-byte key (64 hex characters or base64)`)
      }
      yield* Effect.logWarning(
        `CARD_DATA_KEY is not set: card data is encrypted with a DEVELOPMENT key ${
          loaded.created ? "generated into" : "read from"
        } ${file}. Set CARD_DATA_KEY (32 random bytes, hex or base64) in production.`
      )
      return deriveKeys(key.value)
    })
  )
}

/** For tests and callers that need the config error as a value. */
export const keyFromText = (text: string): Either.Either<CardKeys, string> =>
  Option.match(parseKey(text), {
    onNone: () => Either.left("not a 32-byte key"),
    onSome: (key) => Either.right(deriveKeys(key))
  })
