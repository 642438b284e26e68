/**
 * `node --import tsx bench/compare.ts <other checkout> <read|me|health|signin> [rounds] [seconds]`: this
 * checkout's service against another's (a worktree of the commit before a change), on one route,
 * in alternating runs (local.ts starts both), printed as min / median / max of requests/s, server
 * CPU per request and the database's CPU per request (its PostgreSQL backends: the database shares
 * the machine's cores, so what a statement costs it counts in the rate), and the ratio of the
 * medians (this ÷ other). For measuring one change
 * at a time on a machine whose load moves: both sides see the same load, turn about.
 *
 * `compare.ts <other checkout> start [rounds]`: `npm start` with nothing configured on an existing
 * data directory (starts.ts; each side's first start, which builds and creates it, is not
 * counted), alternating; spawn to the first 200 from /health, and RSS 3 s later.
 */

import { alternating, median } from "./harness.js"
import { startLocalService, target } from "./local.js"
import { dataDirectory, startOnce } from "./starts.js"

const [other, route = "read", roundsArg = "5", secondsArg = "5"] = process.argv.slice(2)
if (other === undefined) throw new Error("usage: compare.ts <other checkout> <read|me|health|start> [rounds] [seconds]")
const rounds = Number(roundsArg)
const seconds = Number(secondsArg)

const spread = (values: Array<number>) =>
  `${Math.min(...values).toFixed(0)} / ${median(values).toFixed(0)} / ${Math.max(...values).toFixed(0)}`

if (route === "start") {
  const roots = { this: process.cwd(), other }
  const dirs = { this: dataDirectory(), other: dataDirectory() }
  const starts = {
    this: { ready: [] as Array<number>, rss: [] as Array<number> },
    other: { ready: [] as Array<number>, rss: [] as Array<number> }
  }
  for (const side of ["this", "other"] as const) await startOnce(roots[side], dirs[side].dir)
  for (let round = 0; round < rounds; round++) {
    for (const side of alternating(round, "this" as const, "other" as const)) {
      const start = await startOnce(roots[side], dirs[side].dir)
      starts[side].ready.push(start.readyMs)
      starts[side].rss.push(start.rssMb)
      console.error(
        `start round ${round + 1} ${side}: ready in ${start.readyMs.toFixed(0)} ms, RSS ${start.rssMb.toFixed(0)} MB`
      )
    }
  }
  for (const [label, key] of [
    ["spawn to first 200 from /health, ms", "ready"],
    ["RSS 3 s after, MB", "rss"]
  ] as const) {
    console.log(
      `start ${label}: this ${spread(starts.this[key])}, other ${spread(starts.other[key])}, ` +
        `ratio ${(median(starts.this[key]) / median(starts.other[key])).toFixed(2)}`
    )
  }
  dirs.this.remove()
  dirs.other.remove()
  process.exit(0)
}

const sides = {
  this: await startLocalService(),
  other: await startLocalService({ root: other })
}
const loads = {
  this: await target(sides.this.baseUrl, route),
  other: await target(sides.other.baseUrl, route)
}
const runs = {
  this: { rate: [] as Array<number>, cpu: [] as Array<number>, database: [] as Array<number> },
  other: { rate: [] as Array<number>, cpu: [] as Array<number>, database: [] as Array<number> }
}
for (const side of ["this", "other"] as const) await loads[side](3)
for (let round = 0; round < rounds; round++) {
  for (const side of alternating(round, "this" as const, "other" as const)) {
    await loads[side](1)
    const databaseBefore = await sides[side].databaseCpuMs()
    const before = sides[side].cpuMs()
    const result = await loads[side](seconds)
    const cpu = sides[side].cpuMs() - before
    const database = (await sides[side].databaseCpuMs()) - databaseBefore
    runs[side].rate.push(result["2xx"] / result.duration)
    runs[side].cpu.push((cpu * 1000) / result["2xx"])
    runs[side].database.push((database * 1000) / result["2xx"])
    const failed = result.non2xx + result.errors
    console.error(
      `${route} round ${round + 1} ${side}: ${(result["2xx"] / result.duration).toFixed(0)} req/s, ` +
        `${((cpu * 1000) / result["2xx"]).toFixed(0)} µs/request, database ` +
        `${((database * 1000) / result["2xx"]).toFixed(0)} µs/request${failed > 0 ? `, ${failed} FAILED` : ""}`
    )
  }
}
for (const [label, key] of [
  ["requests/s", "rate"],
  ["server CPU per request, µs", "cpu"],
  ["database CPU per request, µs", "database"]
] as const) {
  console.log(
    `${route} ${label}: this ${spread(runs.this[key])}, other ${spread(runs.other[key])}, ` +
      `ratio ${(median(runs.this[key]) / median(runs.other[key])).toFixed(2)}`
  )
}
console.log(
  `${route} RSS after the runs, MB: this ${sides.this.rssMb().toFixed(0)}, other ${sides.other.rssMb().toFixed(0)}`
)
await sides.this.stop()
await sides.other.stop()
