/**
 * The layering rules that keep ports swappable, checked on the source text: no viem client leaves
 * src/chain/, the identity check does not reach into card data, and domain services bake in no
 * port (their `dependencies` list only their own repositories).
 */
import { readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"

const sources = (dir: string): ReadonlyArray<string> =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) =>
    entry.isDirectory()
      ? sources(path.join(dir, entry.name))
      : entry.name.endsWith(".ts")
        ? [path.join(dir, entry.name)]
        : []
  )

const files = sources("src").map((file) => ({ file, text: readFileSync(file, "utf8") }))

describe("architecture", () => {
  it("no file outside src/chain/ creates a viem client or touches one", () => {
    const offenders = files
      .filter(({ file }) => !file.startsWith(path.join("src", "chain")))
      .filter(({ text }) => /createPublicClient|createWalletClient|publicClient|walletClient|viem\/actions/.test(text))
      .map(({ file }) => file)
    expect(offenders).toEqual([])
  })

  it("the identity check uses the card service only, never card crypto or card data", () => {
    const imports = files
      .filter(({ file }) => file.startsWith(path.join("src", "kyc")))
      .flatMap(({ file, text }) => [...text.matchAll(/from "\.\.\/cards\/([^"]+)"/g)].map((m) => `${file}: ${m[1]}`))
    expect(imports).toEqual([`${path.join("src", "kyc", "Kyc.ts")}: Cards.js`])
  })

  it("domain services list only repositories in their dependencies", () => {
    const dependencies = files.flatMap(({ file, text }) =>
      [...text.matchAll(/dependencies: \[([^\]]*)\]/g)].flatMap((match) =>
        match[1]!
          .split(",")
          .map((name) => name.trim())
          .filter((name) => name !== "")
          .map((name) => ({ file, name }))
      )
    )
    expect(dependencies.length).toBeGreaterThan(0)
    expect(dependencies.filter(({ name }) => !/^\w+Repo\.Default$/.test(name))).toEqual([])
  })
})
