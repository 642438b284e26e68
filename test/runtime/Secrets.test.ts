import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import { ConfigProvider, Effect, FastCheck, Layer, Option, Redacted } from "effect"
import { documentHash, normalizeDocumentNumber } from "../../src/cards/Cards.js"
import { AppConfig } from "../../src/runtime/Config.js"
import {
  open as decrypt,
  deriveKey,
  seal as encrypt,
  KEY_BYTES,
  loadOrCreateSecretFile,
  parseKey,
  Secrets
} from "../../src/runtime/Secrets.js"

const bytes32 = FastCheck.uint8Array({ minLength: 32, maxLength: 32 })

describe("sealing (AES-256-GCM)", () => {
  it.prop(
    "decrypt(encrypt(x)) = x with the same key and binding",
    [bytes32, FastCheck.string({ maxLength: 64, unit: "grapheme" }), FastCheck.string({ maxLength: 40 })],
    ([key, plaintext, aad]) => {
      const sealed = encrypt(key, plaintext, aad)
      expect(decrypt(key, sealed, aad)).toEqual(Option.some(plaintext))
    }
  )

  it.prop(
    "any flipped bit, another key or another binding fails to open",
    [bytes32, bytes32, FastCheck.stringMatching(/^\d{16}$/), FastCheck.nat(), FastCheck.integer({ min: 0, max: 7 })],
    ([key, otherKey, number, at, bit]) => {
      const sealed = encrypt(key, number, "card:x:number")
      const flipped = new Uint8Array(sealed)
      const i = at % flipped.length
      flipped[i] = flipped[i]! ^ (1 << bit)
      expect(decrypt(key, flipped, "card:x:number")).toEqual(Option.none())
      FastCheck.pre(Buffer.compare(Buffer.from(key), Buffer.from(otherKey)) !== 0)
      expect(decrypt(otherKey, sealed, "card:x:number")).toEqual(Option.none())
      expect(decrypt(key, sealed, "card:y:number")).toEqual(Option.none())
    }
  )

  it("each value gets a fresh IV: equal plaintexts seal differently", () => {
    const key = new Uint8Array(32).fill(7)
    const seals = Array.from({ length: 50 }, () => Buffer.from(encrypt(key, "9406000000000019", "a")).toString("hex"))
    expect(new Set(seals).size).toBe(50)
    expect(new Set(seals.map((s) => s.slice(2, 26))).size).toBe(50)
  })

  it("truncated or unknown-version values do not open", () => {
    const key = new Uint8Array(32).fill(1)
    const sealed = encrypt(key, "123", "a")
    expect(decrypt(key, sealed.subarray(0, 20), "a")).toEqual(Option.none())
    const other = new Uint8Array(sealed)
    other[0] = 2
    expect(decrypt(key, other, "a")).toEqual(Option.none())
  })
})

describe("keys", () => {
  it("CARD_DATA_KEY is 32 bytes as hex or base64", () => {
    const raw = Buffer.alloc(32, 0xab)
    expect(parseKey(raw.toString("hex"))).toEqual(Option.some(new Uint8Array(raw)))
    expect(parseKey(raw.toString("hex").toUpperCase())).toEqual(Option.some(new Uint8Array(raw)))
    expect(parseKey(raw.toString("base64"))).toEqual(Option.some(new Uint8Array(raw)))
    expect(parseKey(raw.toString("base64url"))).toEqual(Option.some(new Uint8Array(raw)))
    expect(parseKey(` ${raw.toString("hex")}\n`)).toEqual(Option.some(new Uint8Array(raw)))
    for (const bad of [
      "",
      "abc",
      Buffer.alloc(31).toString("hex"),
      Buffer.alloc(33).toString("base64"),
      "z".repeat(64)
    ]) {
      expect(parseKey(bad), bad).toEqual(Option.none())
    }
  })

  it("each purpose's key differs from every other and from the master, and is stable", () => {
    const master = new Uint8Array(32).fill(9)
    const keys = (["cardData", "documentHash", "sandboxDocument"] as const).map((purpose) => deriveKey(master, purpose))
    const distinct = new Set([...keys, master].map((key) => Buffer.from(key).toString("hex")))
    expect(distinct.size).toBe(4)
    expect(keys.every((key) => key.length === KEY_BYTES)).toBe(true)
    expect(deriveKey(master, "cardData")).toEqual(keys[0])
  })

  it.effect("a malformed CARD_DATA_KEY stops start-up with a message naming it", () =>
    Effect.gen(function* () {
      const error = yield* Effect.flip(
        Layer.build(Secrets.layer).pipe(
          Effect.scoped,
          Effect.provide(AppConfig.layer),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["CARD_DATA_KEY", "not-a-key"]])))
        )
      )
      expect(String(error)).toContain("CARD_DATA_KEY")
    })
  )

  it.effect("without CARD_DATA_KEY a development key is generated once under DATA_DIR (0600) and reused", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(path.join(tmpdir(), "card-key-"))
      const load = Effect.map(Secrets, (secrets) => secrets.key("cardData")).pipe(
        Effect.provide(Secrets.layer),
        Effect.provide(AppConfig.layer),
        Effect.withConfigProvider(ConfigProvider.fromMap(new Map([["DATA_DIR", path.join(dir, "data")]])))
      )
      const [first, second] = yield* Effect.all([load, load], { concurrency: "unbounded" })
      const third = yield* load
      const file = path.join(dir, "data", "card-data.key")
      expect(statSync(file).mode & 0o777).toBe(0o600)
      expect(readFileSync(file, "utf8").trim()).toMatch(/^[0-9a-f]{64}$/)
      expect(first).toEqual(second)
      expect(first).toEqual(third)
      rmSync(dir, { recursive: true, force: true })
    })
  )

  it.effect("a named secret comes from its variable, else from its development file, read once", () =>
    Effect.gen(function* () {
      const dir = mkdtempSync(path.join(tmpdir(), "named-secret-"))
      const name = { variable: "TEST_SECRET", file: "test.secret", generate: () => "generated-value" }
      const read = (env: Record<string, string>) =>
        Effect.flatMap(Secrets, (secrets) =>
          Effect.zip(secrets.secret(name), secrets.development, { concurrent: false })
        ).pipe(
          Effect.provide(Secrets.layer),
          Effect.provide(AppConfig.layer),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ DATA_DIR: dir, ...env }))))
        )
      const [given, givenDevelopment] = yield* read({ TEST_SECRET: "from-env" })
      expect(Redacted.value(given)).toBe("from-env")
      expect(givenDevelopment).toEqual(["CARD_DATA_KEY"])
      const [generated, development] = yield* read({})
      expect(Redacted.value(generated)).toBe("generated-value")
      expect(development).toEqual(["CARD_DATA_KEY", "TEST_SECRET"])
      expect(readFileSync(path.join(dir, "test.secret"), "utf8").trim()).toBe("generated-value")
      rmSync(dir, { recursive: true, force: true })
    })
  )

  it("concurrent creators of a secret file agree on one value", () => {
    const dir = mkdtempSync(path.join(tmpdir(), "secret-"))
    const file = path.join(dir, "x.secret")
    let n = 0
    const results = Array.from({ length: 5 }, () => loadOrCreateSecretFile(file, () => `value-${n++}`))
    expect(new Set(results.map((r) => r.text)).size).toBe(1)
    expect(results.filter((r) => r.created)).toHaveLength(1)
    rmSync(dir, { recursive: true, force: true })
  })
})

describe("document hash", () => {
  const key = new Uint8Array(32).fill(3)

  it("normalises case, spaces, dashes, dots and slashes", () => {
    expect(normalizeDocumentNumber(" ab-12 34.56/7 ")).toBe("AB1234567")
    expect(normalizeDocumentNumber("Ｘ１２３")).toBe("X123")
    const same = ["AB 123-456", "ab123456", "AB.123.456", " a b 1 2 3 4 5 6 "]
    const hashes = same.map((d) => Buffer.from(documentHash(key, d)).toString("hex"))
    expect(new Set(hashes).size).toBe(1)
    expect(Buffer.from(documentHash(key, "AB123457")).toString("hex")).not.toBe(hashes[0])
  })

  it.prop(
    "a different key gives a different hash",
    [bytes32, FastCheck.stringMatching(/^[A-Z0-9]{4,20}$/)],
    ([other, doc]) => {
      FastCheck.pre(Buffer.compare(Buffer.from(other), Buffer.from(key)) !== 0)
      expect(Buffer.from(documentHash(key, doc)).equals(Buffer.from(documentHash(other, doc)))).toBe(false)
      expect(documentHash(key, doc)).toHaveLength(32)
    }
  )
})
