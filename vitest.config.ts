import { availableParallelism } from "node:os"
import { configDefaults, defineConfig } from "vitest/config"

/** Test files that run in a process of their own (see `isolate` below). */
const ISOLATED = ["test/merchant/**"]

export default defineConfig({
  test: {
    // The reliability suite runs on its own: npm run test:reliability (vitest.reliability.config.ts).
    exclude: [...configDefaults.exclude, "test/reliability/**"],
    globalSetup: ["test/support/globalSetup.ts"],
    // Two files at a time even on two cores (vitest's default there is one): most of a file's time
    // is spent waiting on the processes it starts (PostgreSQL, anvil, services, Chromium).
    maxWorkers: Math.max(2, availableParallelism() - 1),
    minWorkers: 1,
    // A worker's files share one module graph: the app's modules are imported once per worker, not
    // once per file (measured: the suite's import time from 360 s of worker time to 32 s, its wall
    // time 722 s -> 563 s; docs/testing.md). Tests therefore never rely on a fresh module: metrics are
    // read as growth since a scrape (Effect's metrics belong to the process), and nothing sets
    // process.env. The demo merchant's files (the relayer on a devnet) keep a process each: sharing,
    // one of them ("two payments of one payer at once") hung in 2 of 3 full runs and never alone.
    isolate: false,
    // Guards against a hang, not speed checks: a slow machine must make the suite slower, not red.
    // Waits inside tests are bounded on their own (test/support/wait.ts) and name what they awaited.
    testTimeout: 300_000,
    hookTimeout: 300_000,
    // Migrator.fromFileSystem import()s the .ts migrations; vitest must transform them.
    server: { deps: { inline: ["@effect/sql"] } },
    projects: [
      { extends: true, test: { name: "isolated", include: ISOLATED, isolate: true } },
      { extends: true, test: { name: "shared", include: ["test/**/*.test.ts"], exclude: ISOLATED } }
    ]
  }
})
