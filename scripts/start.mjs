/**
 * `npm start`: transpiles src/ and migrations/ into dist/ with esbuild (one file each, no
 * bundling: a fraction of a second), then runs the service from there in this same process, so the
 * service runs as plain JavaScript and its pid is this one's.
 */
import { readdirSync } from "node:fs"
import path from "node:path"
import { fileURLToPath, pathToFileURL } from "node:url"
import * as esbuild from "esbuild"

const root = fileURLToPath(new URL("..", import.meta.url))

const sources = (dir) =>
  readdirSync(path.join(root, dir), { withFileTypes: true }).flatMap((entry) => {
    const relative = path.join(dir, entry.name)
    if (entry.isDirectory()) return sources(relative)
    return entry.name.endsWith(".ts") ? [path.join(root, relative)] : []
  })

await esbuild.build({
  entryPoints: [...sources("src"), ...sources("migrations")],
  outdir: path.join(root, "dist"),
  outbase: root,
  format: "esm",
  platform: "node",
  target: "node20",
  sourcemap: "linked",
  logLevel: "warning"
})
await esbuild.stop()

await import(pathToFileURL(path.join(root, "dist", "src", "main.js")).href)
