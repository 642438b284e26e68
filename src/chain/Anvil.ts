/**
 * The anvil process of the embedded devnet: the binary from `@foundry-rs/anvil`, spawned directly on
 * a free local port under a watchdog and supervised (see EmbeddedServer.ts): an anvil that exits on
 * its own is started again on the same port, so clients keep their URL. With a state folder its
 * chain state is loaded at start and dumped every few seconds and at exit (a hard kill loses what
 * came after the last dump), and its pid is recorded so that a start stops an anvil a previous run
 * left behind before touching the state.
 */
import { mkdir, readFile, rename, rm, writeFile } from "node:fs/promises"
import { createRequire } from "node:module"
import * as path from "node:path"
import { Duration, Effect, type Scope } from "effect"
import { freePort } from "../embedded/EmbeddedPostgres.js"
import { EmbeddedServerError, startServer, stopLeftover, superviseServer } from "../embedded/EmbeddedServer.js"

const SERVER = "anvil"
const LISTEN_TIMEOUT = Duration.seconds(10)
const STOP_GRACE = Duration.seconds(5)
const STATE_INTERVAL_SECONDS = 3
const STATE_FILE = "anvil-state.json"
const PID_FILE = "anvil.pid"

export interface AnvilOptions {
  readonly chainId: number
  /** Keep the chain state (`anvil-state.json`) and the pid file here. Omit for an ephemeral chain. */
  readonly stateDir?: string
  /**
   * Brings the chain back to what its users expect after a restart (its contracts, when the state
   * file lost them); a failure counts as a failed restart.
   */
  readonly recover?: (rpcUrl: string) => Effect.Effect<void, EmbeddedServerError>
}

const failure = (where: string, reason: string, cause?: unknown) =>
  new EmbeddedServerError({ server: SERVER, path: where, reason, cause })

const causeText = (cause: unknown) => (cause instanceof Error ? cause.message : String(cause))

const resolveBinary = Effect.try({
  try: () => {
    const require = createRequire(import.meta.url)
    const arch = process.arch === "x64" ? "amd64" : process.arch
    return require.resolve(`@foundry-rs/anvil-${process.platform}-${arch}/bin/anvil`)
  },
  catch: (cause) =>
    failure("@foundry-rs/anvil", `no anvil binary for ${process.platform}-${process.arch}: ${causeText(cause)}`, cause)
})

/** An anvil left behind keeps dumping into the same state file: stop it (SIGTERM: it dumps its state first). */
const stopLeftoverAnvil = (pidFile: string, stateFile: string) =>
  Effect.gen(function* () {
    const text = yield* Effect.promise(() => readFile(pidFile, "utf8").catch(() => ""))
    const pid = Number.parseInt(text.trim(), 10)
    if (!Number.isSafeInteger(pid) || pid <= 0) return
    yield* stopLeftover({ server: SERVER, pid, marker: stateFile, signal: "SIGTERM", grace: STOP_GRACE })
  })

/** A state file anvil cannot parse (e.g. torn by a hard kill) would stop it from starting: move it aside. */
const quarantineUnreadableState = (stateFile: string) =>
  Effect.gen(function* () {
    const text = yield* Effect.promise(() => readFile(stateFile, "utf8").catch(() => undefined))
    if (text === undefined) return
    try {
      JSON.parse(text)
      return
    } catch {}
    const aside = `${stateFile}.unreadable-${Date.now()}`
    yield* Effect.tryPromise({
      try: () => rename(stateFile, aside),
      catch: (cause) => failure(stateFile, `cannot move the unreadable state file aside: ${causeText(cause)}`, cause)
    })
    yield* Effect.logWarning(`devnet state file was unreadable; moved to ${aside}, starting a fresh chain`)
  })

/**
 * Starts anvil on a free local port and answers its RPC URL. Stopped when the scope closes, or by its
 * watchdog when this process dies.
 */
export const startAnvil = (options: AnvilOptions): Effect.Effect<string, EmbeddedServerError, Scope.Scope> =>
  Effect.gen(function* () {
    const binary = yield* resolveBinary
    const stateDir = options.stateDir === undefined ? undefined : path.resolve(options.stateDir)
    const stateFile = stateDir === undefined ? undefined : path.join(stateDir, STATE_FILE)
    const pidFile = stateDir === undefined ? undefined : path.join(stateDir, PID_FILE)
    if (stateDir !== undefined && stateFile !== undefined && pidFile !== undefined) {
      yield* Effect.tryPromise({
        try: () => mkdir(stateDir, { recursive: true }),
        catch: (cause) => failure(stateDir, `cannot create the state folder: ${causeText(cause)}`, cause)
      })
      yield* stopLeftoverAnvil(pidFile, stateFile)
      // runs after anvil stopped (finalizers run in reverse)
      yield* Effect.addFinalizer(() => Effect.promise(() => rm(pidFile, { force: true }).catch(() => undefined)))
    }
    // chosen once: a restart listens where clients already connect
    const port = yield* freePort
    const server = startServer({
      server: SERVER,
      binary,
      args: [
        "--host",
        "127.0.0.1",
        "--port",
        String(port),
        "--chain-id",
        String(options.chainId),
        ...(stateFile === undefined ? [] : ["--state", stateFile, "--state-interval", String(STATE_INTERVAL_SECONDS)])
      ],
      ready: /Listening on (\S+:\d+)/,
      readyTimeout: LISTEN_TIMEOUT,
      stopSignal: "SIGTERM",
      stopGrace: STOP_GRACE
    }).pipe(
      Effect.tap((running) =>
        pidFile === undefined
          ? Effect.void
          : Effect.promise(() => writeFile(pidFile, `${running.pid}\n`).catch(() => undefined))
      )
    )
    const rpcUrl = `http://127.0.0.1:${port}`
    const { recover } = options
    yield* superviseServer({
      server: SERVER,
      path: stateFile ?? "(ephemeral)",
      // a state file torn by the hard kill is moved aside, as at any start
      start: stateFile === undefined ? server : Effect.zipRight(quarantineUnreadableState(stateFile), server),
      ...(recover === undefined ? {} : { recover: () => recover(rpcUrl) })
    })
    return rpcUrl
  }).pipe(Effect.withSpan("Anvil.start"))
