/**
 * `npm run bench`: the service measured side by side with reference servers, in alternating runs,
 * printed as one markdown table of ratios (min / median / max over the runs) plus the transport
 * counts per operation.
 *
 *   npm run bench                       every section
 *   npm run bench -- --only=pay,counts  some sections (or BENCH_ONLY=pay,counts)
 *   BENCH_QUICK=1 npm run bench         a fast smoke run (tiny sizes, one round)
 *   BENCH_RUNS=5                        rounds per measure (default 3)
 *   BENCH_REMOTE="no delay"             the remote section's comparisons whose label holds the text
 *   BENCH_LOG_LEVEL=Warn                the service's LOG_LEVEL (default: the service's own, Info)
 *
 * Starts everything it needs (embedded PostgreSQL in a temporary folder, devnets, the service as
 * `npm start` runs it, the peer servers) and stops all of it at the end, on failure and on Ctrl-C.
 * Progress goes to stderr, the report to stdout.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { NodeRuntime } from "@effect/platform-node"
import { Cause, Effect, Either, Logger, LogLevel, Redacted, Scope } from "effect"
import { startDevnet } from "../src/chain/Devnet.js"
import { startEmbeddedPostgres } from "../src/embedded/EmbeddedPostgres.js"
import { agentSection } from "./agent.js"
import { authorizeSection } from "./authorize.js"
import { clearingsSection } from "./clearings.js"
import { countsSection } from "./counts.js"
import { eventsSection } from "./events.js"
import {
  type BenchContext,
  type CountRow,
  killDescendantsOnExit,
  machine,
  median,
  type RatioRow,
  type Section,
  serviceEnv,
  serviceNodeFlags,
  sizesFor,
  startPeer,
  startService
} from "./harness.js"
import { healthSection, meSection, readSection } from "./http.js"
import { paySection } from "./pay.js"
import { remoteSection } from "./remote.js"
import { signInSection } from "./signin.js"
import { startupSection } from "./startup.js"

/** In report order. */
const SECTIONS: ReadonlyArray<Section> = [
  paySection,
  remoteSection,
  readSection,
  meSection,
  healthSection,
  signInSection,
  startupSection,
  countsSection,
  agentSection,
  eventsSection,
  authorizeSection,
  clearingsSection
]

const usage = () =>
  [
    "usage: npm run bench [-- --only=<section>[,<section>...]]",
    "sections:",
    ...SECTIONS.map((section) => `  ${section.name.padEnd(8)} ${section.about}`)
  ].join("\n")

/** The sections asked for, or the names nobody knows. */
const selectedSections = () => {
  const flag = process.argv.slice(2).find((arg) => arg.startsWith("--only="))
  const names = (flag?.slice("--only=".length) ?? process.env.BENCH_ONLY ?? "")
    .split(",")
    .map((name) => name.trim())
    .filter((name) => name !== "")
  const unknown = names.filter((name) => !SECTIONS.some((section) => section.name === name))
  if (unknown.length > 0) return Either.left(unknown)
  return Either.right(names.length === 0 ? SECTIONS : SECTIONS.filter((section) => names.includes(section.name)))
}

// ---------------------------------------------------------------------------------------------------
// Report

const number = (value: number) =>
  !Number.isFinite(value)
    ? "–"
    : Math.abs(value) >= 1000
      ? Math.round(value).toLocaleString("en-US")
      : Math.abs(value) >= 100
        ? value.toFixed(0)
        : Math.abs(value) >= 10
          ? value.toFixed(1)
          : value.toFixed(2)

const spread = (values: ReadonlyArray<number>) =>
  `${number(Math.min(...values))} / **${number(median(values))}** / ${number(Math.max(...values))}`

const ratioTable = (rows: ReadonlyArray<RatioRow>) => [
  "| measure | better | this service: min / **median** / max | reference | reference: min / **median** / max | ratio of medians | failed ops (service / reference) |",
  "|---|---|---|---|---|---|---|",
  ...rows.map(
    (row) =>
      `| ${row.measure} | ${row.better} | ${spread(row.service)} | ` +
      `${row.reference} | ${spread(row.peer)} | ${(median(row.service) / median(row.peer)).toFixed(2)}× | ` +
      `${row.errors[0]} / ${row.errors[1]} |`
  )
]

const countNumber = (value: number | undefined) =>
  value === undefined ? "–" : Number.isInteger(value) ? String(value) : value.toFixed(1)

const countTable = (rows: ReadonlyArray<CountRow>) => [
  "| per operation | JSON-RPC calls | SQL statements | what (per operation) |",
  "|---|---|---|---|",
  ...rows.map((row) => `| ${row.flow} | ${countNumber(row.rpc)} | ${countNumber(row.sql)} | ${row.detail || "–"} |`)
]

// ---------------------------------------------------------------------------------------------------
// Main

const program = Effect.gen(function* () {
  if (process.argv.includes("--help")) return console.log(usage())
  const selected = selectedSections()
  if (Either.isLeft(selected)) {
    console.error(`unknown section: ${selected.left.join(", ")}\n${usage()}`)
    process.exitCode = 2
    return
  }
  const sections = selected.right
  const quick = process.env.BENCH_QUICK === "1" || process.argv.includes("--quick")
  const rounds = process.env.BENCH_RUNS === undefined ? undefined : Number(process.env.BENCH_RUNS)
  if (rounds !== undefined && !(Number.isInteger(rounds) && rounds > 0)) {
    console.error("BENCH_RUNS must be a positive integer")
    process.exitCode = 2
    return
  }
  const sizes = sizesFor(quick, rounds)
  const host = machine()
  const started = new Date()
  const progress = (line: string) => console.error(line)
  progress(`bench: ${sections.map((s) => s.name).join(", ")}${quick ? " (quick)" : ""}, ${sizes.rounds} round(s)`)

  const scope = yield* Effect.scope
  killDescendantsOnExit()
  const removeTmp = (dir: string) => rmSync(dir, { recursive: true, force: true, maxRetries: 5 })
  const tmp = yield* Effect.acquireRelease(
    Effect.sync(() => {
      const dir = mkdtempSync(path.join(tmpdir(), "card-service-bench-"))
      chmodSync(dir, 0o755) // PostgreSQL runs as the postgres user when we are root
      process.once("exit", () => removeTmp(dir)) // after the children are killed, should finalizers not run
      return dir
    }),
    (dir) => Effect.sync(() => removeTmp(dir))
  )
  const databaseUrl = Redacted.value(
    yield* startEmbeddedPostgres({ dir: path.join(tmp, "pg"), database: "bench" }).pipe(Effect.orDie)
  )
  const base = { tmp, databaseUrl }
  /** Started on first use, stopped at the end of the whole run. */
  const shared = <A, E>(start: Effect.Effect<A, E, Scope.Scope>) =>
    Effect.cached(start.pipe(Scope.extend(scope), Effect.orDie))
  const sharedDevnet = yield* shared(startDevnet())
  const sharedService = yield* shared(
    Effect.flatMap(sharedDevnet, (devnet) => startService(base, serviceEnv(base, devnet, "shared")))
  )
  // The service migrates the database the bare server reads.
  const sharedBare = yield* shared(
    Effect.zipRight(sharedService, startPeer(base, "bare", { DATABASE_URL: databaseUrl }))
  )
  const sharedFloor = yield* shared(
    Effect.zipRight(sharedService, startPeer(base, "effectFloor", { DATABASE_URL: databaseUrl }, serviceNodeFlags()))
  )
  const ctx: BenchContext = { sizes, ...base, sharedDevnet, sharedService, sharedBare, sharedFloor, progress }

  const ratios: Array<RatioRow> = []
  const counts: Array<CountRow> = []
  const checks: Array<string> = []
  const failed: Array<string> = []
  for (const section of sections) {
    progress(`== ${section.name}: ${section.about}`)
    yield* Effect.scoped(section.run(ctx)).pipe(
      Effect.tap((result) => {
        ratios.push(...result.ratios)
        counts.push(...result.counts)
        checks.push(...(result.checks ?? []))
      }),
      Effect.catchAllCause((cause) => {
        if (Cause.isInterruptedOnly(cause)) return Effect.failCause(cause)
        failed.push(section.name)
        progress(`!! ${section.name} failed:\n${Cause.pretty(cause)}`)
        return Effect.void
      })
    )
  }

  const report = [
    `Measured ${started.toISOString().slice(0, 16).replace("T", " ")} UTC on ${host.cores} cores (${host.cpu}), ` +
      `Node ${host.node}, load average at start ${host.load}.`,
    `${sizes.rounds} run(s) per side and measure, alternating which side goes first; ratio = service median ÷ ` +
      `reference median. Sizes: ${sizes.payments[10]} payments per run at concurrency 10, ${sizes.payments[1]} at ` +
      `concurrency 1, ${sizes.bootPayments} right after boot; ${sizes.loadSeconds} s per autocannon run; ${sizes.signIns} sign-ins per run; ` +
      `${sizes.recoverSeconds} s of recoveries.${quick ? " QUICK SMOKE RUN: not representative." : ""}`,
    "",
    ...(ratios.length > 0 ? ratioTable(ratios) : []),
    ...(checks.length > 0 ? ["", ...checks.map((check) => `- ${check}`)] : []),
    ...(counts.length > 0 ? ["", ...countTable(counts)] : []),
    ...(failed.length > 0 ? ["", `FAILED sections (see the progress log): ${failed.join(", ")}`] : [])
  ]
  console.log(report.join("\n"))
  if (failed.length > 0) return yield* Effect.fail(new Error(`${failed.length} section(s) failed`))
})

program.pipe(
  Effect.scoped,
  Effect.provide(Logger.minimumLogLevel(LogLevel.Warning)),
  NodeRuntime.runMain({ disablePrettyLogger: true })
)
