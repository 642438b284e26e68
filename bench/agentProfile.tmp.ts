import { spawn } from "node:child_process"
import { createInterface } from "node:readline"
import { NodeRuntime } from "@effect/platform-node"
import { SqlClient } from "@effect/sql"
import { Effect, Redacted } from "effect"
import { sqlLayer } from "../src/Database.js"
import { clearAgentBench, seedAgentCards } from "../test/support/agentCards.js"

const url = "postgres://postgres@127.0.0.1:5432/agentprof"
const n = Number(process.env.N ?? 10000)
const main = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  yield* clearAgentBench(sql)
  const t0 = performance.now()
  yield* seedAgentCards(sql, n, new Date())
  console.log("seed ms", performance.now() - t0)
  const child = spawn(
    process.execPath,
    [
      ...(process.env.PROF ? ["--cpu-prof", "--cpu-prof-dir=/tmp/agentprof"] : []),
      "--import",
      "tsx",
      "bench/agentReplica.ts"
    ],
    {
      env: {
        PATH: process.env.PATH!,
        HOME: process.env.HOME!,
        DATABASE_URL: url,
        AGENT_BENCH_CHAIN: "memory",
        AGENT_MODE: "dry",
        AGENT_INTERVAL: "1 hour",
        LOG_LEVEL: "Warn",
        DATA_DIR: "/tmp/agentprof/data",
        AGENT_WALLET_SEED: "bench-seed-0123456789abcdef0123456789",
        CARD_DATA_KEY: "3f1c2b9a8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e8f7a6b5c4d3e2f10"
      },
      stdio: ["pipe", "pipe", "inherit"]
    }
  )
  const lines = createInterface({ input: child.stdout! })[Symbol.asyncIterator]()
  const next = (): Effect.Effect<string> =>
    Effect.promise(() => lines.next()).pipe(
      Effect.flatMap((r) => ((r.value as string).startsWith("{") ? Effect.succeed(r.value as string) : next()))
    )
  console.log(yield* next())
  for (let i = 0; i < Number(process.env.TICKS ?? 3); i++) {
    yield* sql`UPDATE agent_strategies SET due_at = now()`
    child.stdin!.write("tick\n")
    console.log(yield* next())
  }
  child.stdin!.write("exit\n")
  yield* Effect.promise(() => new Promise((r) => child.on("exit", r)))
  yield* clearAgentBench(sql)
})
main.pipe(Effect.provide(sqlLayer(Redacted.make(url))), NodeRuntime.runMain)
