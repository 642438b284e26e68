/**
 * `npm run cards:reconcile`: the card program's reconciliation, once (docs/cards.md,
 * "Reconciliation"). It reads the service's own settings from the environment (DATABASE_URL,
 * CHAIN_RPC_URL and the contract addresses, CARD_PROGRAM_KEY, CHAIN_TIMEOUT, DATA_DIR), so run it
 * with the service's environment; prints one JSON summary on stdout and exits 0 when every clearing,
 * refund, owed amount and the settlement account's balance agree, 1 on any unexplained difference,
 * 2 when it could not reconcile (a database or chain that does not answer, a bad setting). Logs go
 * to stderr.
 *
 * On the embedded defaults (no DATABASE_URL, no CHAIN_RPC_URL) it starts the embedded PostgreSQL and
 * devnet of DATA_DIR itself, as the service does, and so only while the service is stopped: a start
 * stops a server it finds running on the same data, and that would be the running service's. Then
 * it refuses (exit 2); the running service exports the same figures in /metrics.
 */
import { existsSync, readFileSync } from "node:fs"
import path from "node:path"
import { Cause, Effect, Layer, Logger, Option } from "effect"
import { CardReconciler } from "../src/cards/CardReconciler.js"
import { ChainCardProgram } from "../src/cards/ChainCardProgram.js"
import { ConfiguredChain } from "../src/Ports.js"
import { AppConfig } from "../src/runtime/Config.js"
import { Secrets } from "../src/runtime/Secrets.js"
import { SqlLive } from "../src/storage/Database.js"

/** Whether the pid on the first line of `file` is a live process. */
const alive = (file: string) => {
  if (!existsSync(file)) return false
  const pid = Number.parseInt(readFileSync(file, "utf8").split("\n")[0] ?? "", 10)
  if (!Number.isSafeInteger(pid) || pid <= 0) return false
  try {
    process.kill(pid, 0)
    return true
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === "EPERM"
  }
}

/** The embedded servers of DATA_DIR that a running service holds, which this script must not start over. */
const embeddedInUse = Effect.gen(function* () {
  const config = yield* AppConfig
  const rpcUrl = process.env.CHAIN_RPC_URL ?? ""
  return [
    ...(Option.isNone(config.databaseUrl) && alive(path.join(config.dataDir, "pg", "postmaster.pid"))
      ? ["the embedded PostgreSQL"]
      : []),
    ...(rpcUrl === "" && alive(path.join(config.dataDir, "chain", "anvil.pid")) ? ["the embedded devnet"] : [])
  ]
})

const Live = CardReconciler.Default.pipe(
  Layer.provide(ChainCardProgram),
  Layer.provideMerge(ConfiguredChain),
  Layer.provide(Secrets.layer),
  Layer.provide(SqlLive),
  Layer.provide(AppConfig.layer)
)

const reconcileOnce = Effect.gen(function* () {
  const summary = yield* Effect.flatMap(CardReconciler, (reconciler) => reconciler.run)
  process.stdout.write(`${JSON.stringify(summary)}\n`)
  return summary.differences.length === 0 ? 0 : 1
}).pipe(Effect.provide(Live), Effect.scoped)

const program = Effect.gen(function* () {
  const inUse = yield* embeddedInUse.pipe(Effect.provide(AppConfig.layer))
  if (inUse.length > 0) {
    return yield* Effect.fail(
      `${inUse.join(" and ")} of DATA_DIR run (the service is up): stop it first, or run with its DATABASE_URL and CHAIN_RPC_URL; meanwhile its /metrics has card_reconcile_*`
    )
  }
  return yield* reconcileOnce
}).pipe(Effect.provide(Logger.replace(Logger.defaultLogger, Logger.withConsoleError(Logger.jsonLogger))))

Effect.runPromiseExit(program).then((exit) => {
  if (exit._tag === "Success") process.exit(exit.value)
  const failure = Cause.failureOption(exit.cause)
  process.stderr.write(
    `cards:reconcile could not reconcile: ${Option.isSome(failure) ? String(failure.value) : Cause.pretty(exit.cause)}\n`
  )
  process.exit(2)
})
