// The package registry reachable here serves only some platforms' builds of packages that ship
// native binaries as optional dependencies (biome, anvil, rollup, msgpackr-extract). npm then
// leaves those optional packages out of package-lock.json, and `npm ci` refuses the lockfile.
// This adds a lockfile entry for every missing optional platform package, marked with the
// os/cpu/libc it is for, so npm ci skips it here and a machine of that platform installs it.
// Run after `npm install` changes the lockfile: `node scripts/lockfile-platforms.mjs`.
import { readFileSync, writeFileSync } from "node:fs"

const lockPath = new URL("../package-lock.json", import.meta.url)
const lock = JSON.parse(readFileSync(lockPath, "utf8"))
const packages = lock.packages

const OS = ["android", "darwin", "freebsd", "linux", "openbsd", "openharmony", "win32", "sunos", "aix"]
const CPU = {
  amd64: "x64",
  x64: "x64",
  arm64: "arm64",
  arm: "arm",
  ia32: "ia32",
  loong64: "loong64",
  ppc64: "ppc64",
  riscv64: "riscv64",
  s390x: "s390x"
}

const platformOf = (name) => {
  const parts = name.split("/").pop().split("-")
  const os = parts.find((part) => OS.includes(part))
  const cpu = parts.map((part) => CPU[part]).find(Boolean)
  if (os === undefined || cpu === undefined) return undefined
  return { os: [os], cpu: [cpu], ...(parts.includes("musl") || parts.includes("musleabihf") ? { libc: ["musl"] } : {}) }
}

let added = 0
for (const [location, entry] of Object.entries(packages)) {
  for (const [name, version] of Object.entries(entry.optionalDependencies ?? {})) {
    const parent = location === "" ? "" : `${location}/`
    const key = `${parent}node_modules/${name}`
    const hoisted = `node_modules/${name}`
    if (packages[key] !== undefined || packages[hoisted] !== undefined) continue
    const platform = platformOf(name)
    if (platform === undefined) continue
    packages[hoisted] = { version, optional: true, ...platform }
    added++
  }
}
const sorted = Object.fromEntries(
  Object.entries(packages).sort(([a], [b]) => (a === "" ? -1 : b === "" ? 1 : a < b ? -1 : 1))
)
lock.packages = sorted
writeFileSync(lockPath, `${JSON.stringify(lock, null, 2)}\n`)
console.log(`added ${added} optional platform entries`)
