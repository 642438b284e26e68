/**
 * The service's secrets: one master key from which a key per purpose is derived, and named secrets
 * (webhook HMAC secrets, wallet seeds) that come from the environment or, in development, from a
 * file generated once into `DATA_DIR` and logged as a development secret.
 *
 * `CARD_DATA_KEY` holds the master key (32 bytes as 64 hex characters or base64). Each purpose gets
 * its own key through HKDF-SHA256, so no use can be turned against another. Sealed values use
 * AES-256-GCM with a random 96-bit IV; the layout is `0x01 | iv (12) | ciphertext | tag (16)`, and
 * the additional authenticated data names the row and field, so a ciphertext copied elsewhere does
 * not open.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes } from "node:crypto"
import { linkSync, mkdirSync, readFileSync, unlinkSync, writeFileSync } from "node:fs"
import path from "node:path"
import { Config, ConfigError, Context, Effect, Layer, Option, Redacted } from "effect"
import { AppConfig } from "./Config.js"

export const KEY_BYTES = 32
const IV_BYTES = 12
const TAG_BYTES = 16
const VERSION = 0x01

/** What a derived key is for; the HKDF info string of each is fixed forever (changing it loses data). */
const PURPOSES = {
  cardData: "card-data/aes-256-gcm/v1",
  documentHash: "kyc/document-hash/v1",
  cardNumberHash: "card-number/hmac-sha256/v1",
  sandboxDocument: "kyc-sandbox/document/aes-256-gcm/v1"
} as const
export type KeyPurpose = keyof typeof PURPOSES

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

export const deriveKey = (master: Uint8Array, purpose: KeyPurpose): Uint8Array =>
  new Uint8Array(hkdfSync("sha256", master, new Uint8Array(0), Buffer.from(PURPOSES[purpose], "utf8"), KEY_BYTES))

/** Encrypts `plaintext` under `key`, binding it to `aad` (e.g. "card:<id>:number"). */
export const seal = (key: Uint8Array, plaintext: string, aad: string): Uint8Array => {
  const iv = randomBytes(IV_BYTES)
  const cipher = createCipheriv("aes-256-gcm", key, iv)
  cipher.setAAD(Buffer.from(aad, "utf8"))
  const body = Buffer.concat([cipher.update(plaintext, "utf8"), cipher.final()])
  return new Uint8Array(Buffer.concat([Buffer.of(VERSION), iv, body, cipher.getAuthTag()]))
}

/** Opens a value sealed by `seal`; none when the key, the aad or any byte is wrong. */
export const open = (key: Uint8Array, sealed: Uint8Array, aad: string): Option.Option<string> => {
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

/** HMAC-SHA256: equal inputs, equal hashes; no way back without the key. */
export const keyedHash = (key: Uint8Array, text: string): Uint8Array =>
  new Uint8Array(createHmac("sha256", key).update(text, "utf8").digest())

/**
 * Reads `file`, or creates it (mode 0600) with `generate()` when absent. Creation is atomic
 * (write a temporary file, then hard-link it into place), so concurrent starts agree on one value.
 */
export const loadOrCreateSecretFile = (file: string, generate: () => string): { text: string; created: boolean } => {
  mkdirSync(path.dirname(file), { recursive: true, mode: 0o700 })
  try {
    return { text: readFileSync(file, "utf8"), created: false }
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ENOENT") throw error
  }
  const temporary = `${file}.${randomBytes(6).toString("hex")}.tmp`
  writeFileSync(temporary, `${generate()}\n`, { mode: 0o600, flag: "wx" })
  let created = false
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

/** A named secret: the environment variable that sets it, and its development file under DATA_DIR. */
export interface SecretName {
  readonly variable: string
  readonly file: string
  /** What a generated development value looks like. */
  readonly generate: () => string
}

export interface SecretsShape {
  /** The key for one purpose, derived from the master key. */
  readonly key: (purpose: KeyPurpose) => Uint8Array
  /** A named secret from its variable, else from (or into) its development file. */
  readonly secret: (name: SecretName) => Effect.Effect<Redacted.Redacted<string>>
  /** The variables whose development value is in use (for the start-up summary). */
  readonly development: Effect.Effect<ReadonlyArray<string>>
}

const MASTER_KEY: SecretName = {
  variable: "CARD_DATA_KEY",
  file: "card-data.key",
  generate: () => randomBytes(KEY_BYTES).toString("hex")
}

export class Secrets extends Context.Tag("app/Secrets")<Secrets, SecretsShape>() {
  /** From the environment, with development files under DATA_DIR for whatever is not set. */
  static readonly layer = Layer.effect(
    Secrets,
    Effect.gen(function* () {
      const { dataDir } = yield* AppConfig
      const development = new Set<string>()
      const known = new Map<string, Redacted.Redacted<string>>()
      const read = (name: SecretName) =>
        Effect.gen(function* () {
          const given = yield* Config.option(Config.redacted(name.variable)).pipe(Effect.orDie)
          if (Option.isSome(given) && Redacted.value(given.value).trim() !== "") return given.value
          const file = path.resolve(dataDir, name.file)
          const loaded = yield* Effect.try({
            try: () => loadOrCreateSecretFile(file, name.generate),
            catch: (error) => new Error(`cannot read or create the development secret ${file}: ${String(error)}`)
          }).pipe(Effect.orDie)
          const text = loaded.text.trim()
          if (text === "") return yield* Effect.dieMessage(`${file} is empty`)
          development.add(name.variable)
          yield* Effect.logWarning(
            `${name.variable} is not set: using a DEVELOPMENT value ${loaded.created ? "generated into" : "read from"} ` +
              `${file}. Set ${name.variable} in production.`
          )
          return Redacted.make(text)
        })

      /** Each secret is read (and its development warning logged) once. */
      const secret = (name: SecretName) =>
        Effect.suspend(() => {
          const value = known.get(name.variable)
          return value !== undefined
            ? Effect.succeed(value)
            : Effect.tap(read(name), (read) => Effect.sync(() => known.set(name.variable, read)))
        })

      const masterText = yield* secret(MASTER_KEY)
      const master = parseKey(Redacted.value(masterText))
      if (Option.isNone(master)) {
        return yield* Effect.fail(
          ConfigError.InvalidData(
            [MASTER_KEY.variable],
            `Expected ${MASTER_KEY.variable} to be 32 bytes written as 64 hex characters or as base64`
          )
        )
      }
      return Secrets.of({
        key: (purpose) => deriveKey(master.value, purpose),
        secret,
        development: Effect.sync(() => [...development])
      })
    })
  )

  /** Random keys and secrets held in memory only (tests, demos): nothing is read or written. */
  static readonly ephemeral = Layer.sync(Secrets, () => {
    const master = new Uint8Array(randomBytes(KEY_BYTES))
    const secrets = new Map<string, Redacted.Redacted<string>>()
    return Secrets.of({
      key: (purpose) => deriveKey(master, purpose),
      secret: (name) =>
        Effect.sync(() => {
          const known = secrets.get(name.variable)
          if (known !== undefined) return known
          const fresh = Redacted.make(name.generate())
          secrets.set(name.variable, fresh)
          return fresh
        }),
      development: Effect.succeed([])
    })
  })
}
