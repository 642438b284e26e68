/**
 * `node --import tsx bench/compare.ts <other checkout> <read|me|health> [rounds] [seconds]`: this
 * checkout's service against another's (a worktree of the commit before a change), on one route,
 * in alternating runs (local.ts starts both), printed as min / median / max of requests/s and
 * server CPU per request, and the ratio of the medians (this ÷ other). For measuring one change
 * at a time on a machine whose load moves: both sides see the same load, turn about.
 */

import { alternating, median } from "./harness.js"
import { startLocalService, target } from "./local.js"

const [other, route = "read", roundsArg = "5", secondsArg = "5"] = process.argv.slice(2)
if (other === undefined) throw new Error("usage: compare.ts <other checkout> <read|me|health> [rounds] [seconds]")
const rounds = Number(roundsArg)
const seconds = Number(secondsArg)

const sides = {
  this: await startLocalService(),
  other: await startLocalService({ root: other })
}
const loads = {
  this: await target(sides.this.baseUrl, route),
  other: await target(sides.other.baseUrl, route)
}
const runs = {
  this: { rate: [] as Array<number>, cpu: [] as Array<number> },
  other: { rate: [] as Array<number>, cpu: [] as Array<number> }
}
for (const side of ["this", "other"] as const) await loads[side](3)
for (let round = 0; round < rounds; round++) {
  for (const side of alternating(round, "this" as const, "other" as const)) {
    await loads[side](1)
    const before = sides[side].cpuMs()
    const result = await loads[side](seconds)
    const cpu = sides[side].cpuMs() - before
    runs[side].rate.push(result["2xx"] / result.duration)
    runs[side].cpu.push((cpu * 1000) / result["2xx"])
    const failed = result.non2xx + result.errors
    console.error(
      `${route} round ${round + 1} ${side}: ${(result["2xx"] / result.duration).toFixed(0)} req/s, ` +
        `${((cpu * 1000) / result["2xx"]).toFixed(0)} µs/request${failed > 0 ? `, ${failed} FAILED` : ""}`
    )
  }
}
const spread = (values: Array<number>) =>
  `${Math.min(...values).toFixed(0)} / ${median(values).toFixed(0)} / ${Math.max(...values).toFixed(0)}`
for (const [label, key] of [
  ["requests/s", "rate"],
  ["server CPU per request, µs", "cpu"]
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
