/**
 * `npm run test:unit`: the tests of the pure modules, in seconds, with nothing started (no
 * PostgreSQL, no devnet, no web build, no server). A test file is one of them when nothing it
 * imports, however indirectly, reaches the outside world (`OUTSIDE` below): which files those are
 * follows from the import graph, so a new pure test is picked up and one that starts to need a
 * database drops out by itself. `npm test` runs them too.
 */
import { readFileSync } from "node:fs"
import { availableParallelism } from "node:os"
import { configDefaults, defineConfig } from "vitest/config"
import { importGraph, sourceFiles } from "./test/support/importGraph.js"

/**
 * Modules that start or reach something outside the process: a test importing one is not a unit
 * test. So is a module that starts a process of its own (imports node:child_process).
 */
const OUTSIDE = [
  /^scripts\/compile-contracts\.ts$/,
  /^src\/App\.ts$/,
  /^src\/main\.ts$/,
  /^src\/embedded\//,
  /^src\/storage\/Database\.ts$/,
  /^src\/chain\/(Anvil|Devnet|EvmChain)\.ts$/,
  /^src\/app\/WebBuild\.ts$/,
  /^test\/support\/(TestDatabase|TestServer|TestChain|process|chromium|webapp|TcpProxy|RpcProxy|FaultyChain)\.ts$/
]

const files = [...sourceFiles("src"), ...sourceFiles("test"), ...sourceFiles("scripts")].map((file) => ({
  file,
  text: readFileSync(file, "utf8")
}))
const graph = importGraph(files)
const spawning = new Set(files.filter(({ text }) => /from "node:child_process"/.test(text)).map(({ file }) => file))

const reachesOutside = (file: string, seen = new Set<string>()): boolean => {
  if (spawning.has(file) || OUTSIDE.some((pattern) => pattern.test(file))) return true
  if (seen.has(file)) return false
  seen.add(file)
  return (graph.get(file) ?? []).some((imported) => reachesOutside(imported, seen))
}

export const unitTestFiles = [...graph.keys()]
  .filter((file) => file.endsWith(".test.ts") && !file.startsWith("test/reliability/"))
  .filter((file) => !reachesOutside(file))
  .sort()

export default defineConfig({
  test: {
    include: unitTestFiles,
    exclude: [...configDefaults.exclude],
    isolate: false,
    // Two files at a time even on two cores (vitest's default there is one).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    minWorkers: 1,
    // As in vitest.config.ts: a guard against a hang, not a speed check.
    testTimeout: 300_000
  }
})
