/**
 * `node --import tsx bench/profile.ts <read|me|health|signin|pay> [seconds]`: a CPU profile of the
 * service under load on one route, and its top self-time frames by package (`pay`: 10 x402 clients
 * paying orders, on a devnet of its own).
 *
 * Starts the service under `node --cpu-prof` (local.ts: the `npm start` bundle, the machine's
 * PostgreSQL, an embedded devnet), primes it for 5 s, loads the route with autocannon (10
 * connections) for `seconds` (default 8), stops it, and prints the server CPU per request and the
 * frames of the load window only (start-up and warm-up samples are left out). Each frame is attributed to the module the
 * bundle took it from (esbuild writes a `// node_modules/…` or `// src/…` comment before each
 * module's code). The profile's folder is removed, unless PROFILE_KEEP=1 keeps it (its path is printed).
 */
import { readdirSync, readFileSync } from "node:fs"
import path from "node:path"
import { payDevnet, startLocalService, target } from "./local.js"

const [route = "read", secondsArg = "8"] = process.argv.slice(2)
const seconds = Number(secondsArg)

const paying = route === "pay" ? await payDevnet() : undefined
const service = await startLocalService({ profile: true, ...(paying === undefined ? {} : { env: paying.env }) })
const load = paying === undefined ? await target(service.baseUrl, route) : paying.load(service.baseUrl)
await load(5)
const startedAt = performance.now()
const cpuBefore = service.cpuMs()
const result = await load(seconds)
const cpu = service.cpuMs() - cpuBefore
const endedAt = performance.now()
console.log(
  `${route}: ${Math.round(result["2xx"] / result.duration)} req/s, ` +
    `${Math.round((cpu * 1000) / result["2xx"])} µs of server CPU per request, ${result.non2xx + result.errors} failed`
)
const exitedAt = await service.stop()
await paying?.close()
const tmp = service.dir

// ---------------------------------------------------------------------------------------------------
// The profile's self time in the load window, by frame and by module

interface Node {
  readonly id: number
  readonly callFrame: { functionName: string; url: string; lineNumber: number }
}
interface Profile {
  readonly nodes: ReadonlyArray<Node>
  readonly startTime: number
  readonly samples: ReadonlyArray<number>
  readonly timeDeltas: ReadonlyArray<number>
}

const file = readdirSync(tmp).find((name) => name.endsWith(".cpuprofile"))
if (file === undefined) throw new Error(`no profile in ${tmp}`)
const profile = JSON.parse(readFileSync(path.join(tmp, file), "utf8")) as Profile
if (process.env.PROFILE_KEEP !== "1") service.remove()

/** The module comments of each bundle file: line → module path. */
const modulesOf = new Map<string, Array<readonly [number, string]>>()
const moduleAt = (url: string, line: number) => {
  if (!url.startsWith("file://")) return url === "" ? "(vm)" : url
  let marks = modulesOf.get(url)
  if (marks === undefined) {
    marks = []
    const lines = readFileSync(new URL(url), "utf8").split("\n")
    for (const [index, text] of lines.entries()) {
      // A symlinked node_modules shows as its target's path (`../main/node_modules/…`).
      const mark = /^\/\/ (?:\S*?\/)?((?:node_modules|src|migrations)\/\S+)$/.exec(text)
      if (mark) marks.push([index, mark[1]!])
    }
    modulesOf.set(url, marks)
  }
  let found = url.slice(url.lastIndexOf("/") + 1)
  for (const [start, name] of marks) {
    if (start > line) break
    found = name
  }
  return found
}

const packageOf = (module: string) => {
  const match = /^node_modules\/((?:@[^/]+\/)?[^/]+)/.exec(module)
  return match ? match[1]! : module.startsWith("src/") ? "src (the service)" : module
}

// Profile times are microseconds of another clock: the window is placed back from the profile's end (the exit).
const profileEnd = profile.startTime + profile.timeDeltas.reduce((sum, delta) => sum + delta, 0)
const windowEnd = profileEnd - (exitedAt - endedAt) * 1000
const windowStart = windowEnd - (endedAt - startedAt) * 1000
const byId = new Map(profile.nodes.map((node) => [node.id, node]))
const self = new Map<number, number>()
let time = profile.startTime
let total = 0
for (const [index, sample] of profile.samples.entries()) {
  time += profile.timeDeltas[index]!
  if (time < windowStart || time > windowEnd) continue
  const delta = profile.timeDeltas[index]!
  self.set(sample, (self.get(sample) ?? 0) + delta)
  total += delta
}

const frames = new Map<string, number>()
const packages = new Map<string, number>()
for (const [id, micros] of self) {
  const { functionName, url, lineNumber } = byId.get(id)!.callFrame
  const module = moduleAt(url, lineNumber)
  // An anonymous function is told apart by its line in the bundle.
  const frame = `${functionName || `(anonymous):${lineNumber + 1}`} ${module}`
  frames.set(frame, (frames.get(frame) ?? 0) + micros)
  const pkg = url.startsWith("file://") ? packageOf(module) : functionName
  packages.set(pkg, (packages.get(pkg) ?? 0) + micros)
}
const top = (map: Map<string, number>, count: number) =>
  [...map.entries()]
    .sort((a, b) => b[1] - a[1])
    .slice(0, count)
    .map(([name, micros]) => `| ${((100 * micros) / total).toFixed(1)}% | \`${name}\` |`)
    .join("\n")
console.log(`profile: ${path.join(tmp, file)}; ${(total / 1000).toFixed(0)} ms of samples in the load window`)
console.log(`\n| self | package |\n|---:|---|\n${top(packages, 15)}`)
console.log(`\n| self | frame (module) |\n|---:|---|\n${top(frames, 25)}`)
