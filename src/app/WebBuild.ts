/**
 * The web app's build: the TypeScript, TSX and CSS under web/ bundled by esbuild into static files
 * under dist/web/ (an `index.html` and content-hashed files under `assets/`, each with a gzip twin).
 * The service runs it as it starts (`ensureWebBuild`), so `npm start`, `npm run dev`, the tests and
 * CI need no step of their own; a build is reused while no file it read (under web/ and the modules of
 * src/ that web/ imports, such as the API's schemas), no file under web/, nor this module, nor
 * package-lock.json has changed (their paths, sizes and modification times are compared with the
 * build's stamp), as scripts/start.mjs does for the service itself.
 *
 * A build is written into a folder of its own and then renamed into place, so two processes that
 * start together (test workers) never read a half-written build. Without web/ (a deployment that
 * ships only dist/) the existing build is served as it is.
 */
import { existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs"
import { createRequire } from "node:module"
import path from "node:path"
import { fileURLToPath } from "node:url"
import { gzipSync } from "node:zlib"

/** Where the built app is, relative to the project's root. */
export const WEB_OUT = path.join("dist", "web")
/** The built app's files are served under this path (and index.html for every other path under /app). */
export const ASSETS_PATH = "/app/assets/"
/** The placeholder in the built index.html that the service replaces with its configuration. */
export const CONFIG_MARKER = "<!--app-config-->"

const STAMP = "build-stamp.json"

/** The project's root: the nearest folder above this module holding package.json (src/app/ or dist/src/). */
export const projectRoot = (from: string = fileURLToPath(import.meta.url)): string => {
  let dir = path.dirname(from)
  while (!existsSync(path.join(dir, "package.json"))) {
    const parent = path.dirname(dir)
    if (parent === dir) throw new Error(`no package.json above ${from}`)
    dir = parent
  }
  return dir
}

const filesUnder = (root: string, dir: string): ReadonlyArray<string> =>
  readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = path.join(dir, entry.name)
    return entry.isDirectory() ? filesUnder(root, relative) : [relative]
  })

type FileStat = readonly [file: string, size: number, modified: number]

/** Paths, sizes and modification times of the files given that exist. */
const statsOf = (root: string, files: Iterable<string>): ReadonlyArray<FileStat> =>
  [...new Set(files)]
    .sort()
    .filter((file) => existsSync(path.join(root, file)))
    .map((file) => {
      const stat = statSync(path.join(root, file))
      return [file, stat.size, stat.mtimeMs] as const
    })

/** Files a build depends on whatever it read: every file under web/ (a new one may be imported), this module and the lock file. */
const alwaysStamped = (root: string) => [
  ...filesUnder(root, "web"),
  path.join("src", "app", "WebBuild.ts"),
  "package-lock.json"
]

/**
 * What decides whether a build is current: the files it read outside node_modules (the lock file
 * stands for those) and the files always stamped, as they were before it started.
 */
const stampOf = (stats: ReadonlyArray<FileStat>, paths: ReadonlyArray<string>) => {
  const keep = new Set(paths)
  return JSON.stringify({ paths, stats: stats.filter(([file]) => keep.has(file)) })
}

const isCurrent = (root: string, stamp: string) => {
  const { paths } = JSON.parse(stamp) as { paths: ReadonlyArray<string> }
  const files = [...new Set([...alwaysStamped(root), ...paths])].sort()
  return stamp === stampOf(statsOf(root, files), files)
}

const page = (script: string, style: string) => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="color-scheme" content="light">
<title>Card</title>
<link rel="icon" href="${ASSETS_PATH}${ICON}">
<link rel="stylesheet" href="${ASSETS_PATH}${style}">
<script type="module" src="${ASSETS_PATH}${script}"></script>
${CONFIG_MARKER}
</head>
<body>
<div id="root"><noscript>This app needs JavaScript.</noscript></div>
</body>
</html>
`

/** The tab's icon, a file of its own (the page's policy loads nothing inline). */
const ICON = "icon.svg"
const ICON_SVG =
  '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect x="2" y="7" width="28" height="18" rx="3" ' +
  'fill="#1d4ed8"/><rect x="2" y="11" width="28" height="4" fill="#0f172a"/><rect x="6" y="19" width="8" ' +
  'height="2" rx="1" fill="#fff"/></svg>'

/**
 * Builds web/ into `out` (a fresh folder): the bundle, its chunks, the page and gzip twins. Answers
 * the files the bundle read outside node_modules, relative to `root`.
 */
const build = async (root: string, out: string): Promise<ReadonlyArray<string>> => {
  // required, not imported: npm start runs the service's bundle as a script, which has no import()
  const esbuild = createRequire(import.meta.url)("esbuild") as typeof import("esbuild")
  try {
    const result = await esbuild.build({
      absWorkingDir: root,
      entryPoints: { main: path.join(root, "web", "main.tsx") },
      outdir: path.join(out, "assets"),
      entryNames: "[name]-[hash]",
      chunkNames: "chunk-[hash]",
      assetNames: "[name]-[hash]",
      bundle: true,
      splitting: true,
      format: "esm",
      platform: "browser",
      target: ["es2022", "chrome111", "firefox111", "safari16"],
      jsx: "automatic",
      jsxImportSource: "preact",
      minify: true,
      // No source maps: the service keeps every file in memory, and the maps would be ten times the code.
      legalComments: "eof",
      metafile: true,
      logLevel: "warning",
      define: { "process.env.NODE_ENV": '"production"' },
      tsconfig: path.join(root, "web", "tsconfig.json")
    })
    const outputs = Object.entries(result.metafile.outputs)
    const entry = outputs.find(([, output]) => output.entryPoint !== undefined && output.cssBundle !== undefined)
    if (entry === undefined) throw new Error("the web build produced no entry script with its stylesheet")
    const [script, { cssBundle }] = entry
    writeFileSync(path.join(out, "assets", ICON), ICON_SVG)
    writeFileSync(path.join(out, "index.html"), page(path.basename(script), path.basename(cssBundle!)))
    for (const file of filesUnder(out, "assets")) {
      if (!/\.(js|css|svg)$/.test(file)) continue
      writeFileSync(path.join(out, `${file}.gz`), gzipSync(readFileSync(path.join(out, file)), { level: 9 }))
    }
    return Object.keys(result.metafile.inputs)
      .filter((file) => !file.split(/[\\/]/).includes("node_modules"))
      .map((file) => path.normalize(file))
  } finally {
    await esbuild.stop()
  }
}

const renameIfThere = (from: string, to: string) => {
  try {
    renameSync(from, to)
  } catch {
    // Gone already: another process moved it.
  }
}

export interface WebBuild {
  /** The folder holding index.html and assets/. */
  readonly dir: string
  /** Whether this call built it (false: an earlier build was current). */
  readonly built: boolean
}

/** The build this process is making: services started together in one process share it (one esbuild). */
let inFlight: Promise<WebBuild> | undefined

/** Builds the web app unless its build is current; answers where it is. */
export const ensureWebBuild = (root: string = projectRoot()): Promise<WebBuild> => {
  inFlight ??= ensure(root).finally(() => {
    inFlight = undefined
  })
  return inFlight
}

const ensure = async (root: string): Promise<WebBuild> => {
  const dir = path.join(root, WEB_OUT)
  const current = () => {
    try {
      return isCurrent(root, readFileSync(path.join(dir, STAMP), "utf8"))
    } catch {
      return false
    }
  }
  if (!existsSync(path.join(root, "web"))) {
    if (!existsSync(path.join(dir, "index.html"))) throw new Error(`no web/ sources and no built app in ${dir}`)
    return { dir, built: false }
  }
  if (current()) return { dir, built: false }
  // Taken before the build, so that a file edited while it runs makes the next start build again.
  const before = statsOf(root, [...alwaysStamped(root), ...filesUnder(root, "src")])
  const fresh = `${dir}.build-${process.pid}-${Date.now()}`
  const old = `${dir}.old-${process.pid}-${Date.now()}`
  try {
    const read = await build(root, fresh)
    const paths = [...new Set([...alwaysStamped(root), ...read])].sort()
    const outside = paths.filter((file) => !before.some(([known]) => known === file))
    writeFileSync(path.join(fresh, STAMP), stampOf([...before, ...statsOf(root, outside)], paths))
    // Another process may swap its own build in meanwhile: whichever lands, it is as current.
    if (existsSync(dir)) renameIfThere(dir, old)
    try {
      renameSync(fresh, dir)
    } catch (error) {
      if (!current()) throw error
    }
  } finally {
    rmSync(fresh, { recursive: true, force: true })
    rmSync(old, { recursive: true, force: true })
  }
  return { dir, built: true }
}
