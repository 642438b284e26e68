/**
 * The layering rules, checked on the source text: floors that run one way (the platform imports no
 * domain, a domain reaches another only through its face, no circle: test/support/importGraph.ts,
 * each rule also shown failing on a tiny graph), src/ root holds only the app, and the rules that
 * keep ports swappable: no viem client leaves src/chain/, the identity check does not reach into
 * card data, and domain services bake in no port (their `dependencies` list only their own
 * repositories); a part switched on by configuration is switched one way, as a Feature; and a
 * file over 500 lines says at its top why it is one unit.
 */
import { readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import { describe, expect, it } from "@effect/vitest"
import {
  breaches,
  circles,
  FACES,
  folderCircles,
  type ImportGraph,
  importGraph,
  PLATFORM,
  relativeImports,
  sourceGraph
} from "./support/importGraph.js"

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
    expect(imports.sort()).toEqual([
      `${path.join("src", "kyc", "Kyc.ts")}: Cards.js`,
      // the sandbox's form checks a number's normal form, the one card issuance tells documents apart by
      `${path.join("src", "kyc", "SandboxDesk.ts")}: Cards.js`
    ])
  })

  it("a part switched on by configuration is a Feature (http/Feature.ts): no other way to switch one", () => {
    const found = (pattern: RegExp, what: string, allowed: (file: string) => boolean) =>
      files.filter(({ file, text }) => pattern.test(text) && !allowed(file)).map(({ file }) => `${file}: ${what}`)
    const oneOf =
      (...names: ReadonlyArray<string>) =>
      (file: string) =>
        names.some((name) => file === path.join("src", ...name.split("/")))
    expect([
      ...found(/HttpApi\.make\(/, "composes an API", oneOf("Api.ts", "http/Feature.ts")),
      ...found(/HttpApiBuilder\.api\(/, "serves an API", oneOf("App.ts")),
      // a part's handlers are built only while it is on: none asks whether a service exists
      ...found(
        /Effect\.serviceOption\(/,
        "asks whether a service exists",
        (file) => !file.endsWith(`${path.sep}Http.ts`)
      ),
      ...found(/Layer\.empty as /, "stands in for a layer by a cast", () => false)
    ]).toEqual([])
  })

  it("a file of src/ over 500 lines says at its top why it is one unit", () => {
    const unexplained = files
      .filter(({ text }) => text.split("\n").length > 500)
      .filter(({ text }) => !/\bOne (unit|file|repository)\b/.test(text.slice(0, text.indexOf("*/"))))
      .map(({ file }) => file)
    expect(unexplained).toEqual([])
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

const graphOf = (edges: Record<string, ReadonlyArray<string>>): ImportGraph => new Map(Object.entries(edges))

describe("floors that run one way, on tiny graphs", () => {
  it("a platform file importing a domain, or the app, breaks the floors", () => {
    expect(breaches(graphOf({ "src/http/Pipeline.ts": ["src/cards/Cards.ts", "src/storage/Sql.ts"] }))).toEqual([
      "src/http/Pipeline.ts -> src/cards/Cards.ts: the platform imports no domain"
    ])
    expect(breaches(graphOf({ "src/storage/Sql.ts": ["src/Api.ts"] }))).toHaveLength(1)
  })

  it("a domain may use the platform and another domain's face, not its insides", () => {
    const graph = graphOf({
      "src/agent/Agent.ts": ["src/http/ApiError.ts", "src/cards/Cards.ts", "src/agent/AgentRepo.ts"],
      "src/agent/Http.ts": ["src/Api.ts"],
      "src/agent/AgentLoop.ts": ["src/cards/CardRepo.ts", "src/App.ts"]
    })
    expect(breaches(graph)).toEqual([
      "src/agent/AgentLoop.ts -> src/cards/CardRepo.ts: cards/CardRepo.ts is inside cards/, not its face",
      "src/agent/AgentLoop.ts -> src/App.ts: only the app imports the app's files (a domain's Http.ts may import Api.ts)"
    ])
  })

  it("the app may import anything", () => {
    expect(breaches(graphOf({ "src/App.ts": ["src/http/Server.ts", "src/kyc/SandboxDesk.ts", "src/Api.ts"] }))).toEqual(
      []
    )
  })

  it("a circle is found, however long; a graph without one has none", () => {
    const circle = graphOf({ a: ["b"], b: ["c"], c: ["a", "d"], d: [], e: ["a"] })
    expect(circles(circle)).toEqual([["a", "b", "c"]])
    expect(circles(graphOf({ a: ["b"], b: ["c"], c: [], e: ["a", "c"] }))).toEqual([])
  })

  it("folders that import each other are a circle, though no file is in one; the Api.ts idiom is not", () => {
    const graph = graphOf({
      "src/kyc/Kyc.ts": ["src/events/Events.ts"],
      "src/events/Events.ts": [],
      "src/events/EventStreams.ts": ["src/kyc/KycState.ts"],
      "src/kyc/KycState.ts": []
    })
    expect(circles(graph)).toEqual([])
    expect(folderCircles(graph)).toEqual([["src/events", "src/kyc"]])
    const longer = graphOf({ "src/a/A.ts": ["src/b/B.ts"], "src/b/B.ts": ["src/c/C.ts"], "src/c/C.ts": ["src/a/X.ts"] })
    expect(folderCircles(longer)).toEqual([["src/a", "src/b", "src/c"]])
    const api = graphOf({
      "src/Api.ts": ["src/cards/Api.ts"],
      "src/cards/Api.ts": [],
      "src/cards/Http.ts": ["src/Api.ts", "src/cards/Cards.ts"],
      "src/cards/Cards.ts": []
    })
    expect(folderCircles(api)).toEqual([])
    // only a domain's Http.ts builds on the API: any other file closes the circle
    expect(folderCircles(new Map([...api, ["src/cards/Cards.ts", ["src/Api.ts"]]]))).toEqual([
      ["src/Api.ts", "src/cards"]
    ])
  })

  it("imports are read from every form: static, type-only, re-export and import()", () => {
    const text = [
      'import type { Card } from "../cards/Card.js"',
      'export * from "./Api.js"',
      'const { x } = await import("./Lazy.js")',
      'import { Effect } from "effect"'
    ].join("\n")
    expect(relativeImports(text)).toEqual(["../cards/Card.js", "./Api.js", "./Lazy.js"])
    expect(importGraph([{ file: "src/kyc/Kyc.ts", text }]).get("src/kyc/Kyc.ts")).toEqual([
      "src/cards/Card.ts",
      "src/kyc/Api.ts",
      "src/kyc/Lazy.ts"
    ])
  })
})

describe("floors that run one way, on src/", () => {
  const graph = sourceGraph()

  it("every import names a file of src/ (the graph is read whole)", () => {
    const targets = [...graph.values()].flat()
    expect(targets.length).toBeGreaterThan(300)
    expect(targets.filter((target) => !graph.has(target))).toEqual([])
  })

  it("the platform imports no domain, only the app imports the app, domains meet at their faces", () => {
    expect(breaches(graph)).toEqual([])
  })

  it("no files import each other in a circle", () => {
    expect(circles(graph)).toEqual([])
  })

  it("no folders import each other in a circle, but for the Api.ts idiom", () => {
    expect(folderCircles(graph)).toEqual([])
  })

  it("src/ holds the app's files and folders that are the platform or a domain with a face", () => {
    const entries = readdirSync("src", { withFileTypes: true })
    expect(entries.filter((entry) => entry.isFile()).map((entry) => entry.name)).toEqual([
      "Api.ts",
      "App.ts",
      "Client.ts",
      "Ports.ts",
      "main.ts"
    ])
    const known = [...PLATFORM, ...Object.keys(FACES)]
    expect(entries.filter((entry) => entry.isDirectory() && !known.includes(entry.name)).map((e) => e.name)).toEqual([])
  })

  it("every face names a file that exists", () => {
    const missing = Object.entries(FACES).flatMap(([folder, names]) =>
      names.map((name) => `src/${folder}/${name}`).filter((file) => !graph.has(file))
    )
    expect(missing).toEqual([])
  })
})
