/**
 * The life cycle of an embedded server process (PostgreSQL, anvil), shared by both:
 *
 * - `startServer` spawns it as a scoped resource, waits for its readiness line and stops it with
 *   its own signal (then SIGKILL) when the scope closes;
 * - a watchdog (`sh`, reading a pipe from this process) stops it when this process dies without
 *   closing the scope, even by SIGKILL: the pipe reaches EOF when the kernel closes our end;
 * - `superviseServer` restarts it with backoff when it exits on its own, and ends the service
 *   (`ServiceHalt`) when it cannot be kept running;
 * - `stopLeftover` stops a server that a previous run left behind, after checking through /proc
 *   that the pid still belongs to it;
 * - every failure is an `EmbeddedServerError` naming the server, the path and the cause.
 *
 * One file because these are one process's life, from spawn to leftover: each step hands the next
 * the same handle (pid, pipe, readiness), and both servers use them all.
 */
import { type ChildProcess, spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import {
  Clock,
  Context,
  Data,
  Deferred,
  Duration,
  Effect,
  ExecutionStrategy,
  Exit,
  Option,
  Schedule,
  Scope
} from "effect"

export class EmbeddedServerError extends Data.TaggedError("EmbeddedServerError")<{
  /** "PostgreSQL", "anvil" */
  readonly server: string
  /** The binary, data folder or state file concerned. */
  readonly path: string
  readonly reason: string
  readonly cause?: unknown
}> {
  override get message() {
    return `${this.server} did not start (${this.path}): ${this.reason}`
  }
}

/** A supervised server exited and every restart in a row failed: the service cannot go on. */
export class EmbeddedServerLost extends Data.TaggedError("EmbeddedServerLost")<{
  readonly server: string
  readonly path: string
  readonly reason: string
}> {
  override get message() {
    return `${this.server} (${this.path}) exited and could not be restarted: ${this.reason}`
  }
}

/**
 * Ends the service when an embedded server is lost: `launch` (Launch.ts) provides it, stops
 * everything and exits non-zero with one fatal line, so that a supervisor restarts the service.
 * Without it (a test running a server in process) the supervisor only logs the loss.
 */
export class ServiceHalt extends Context.Tag("app/ServiceHalt")<
  ServiceHalt,
  { readonly halt: (error: EmbeddedServerLost) => Effect.Effect<void> }
>() {}

/** A user to run a server as (root runs PostgreSQL as `postgres`). */
export interface PosixUser {
  readonly uid: number
  readonly gid: number
}

/** The /proc/<pid>/stat fields after the command name: [0] is the state, [19] the start time. */
const statFields = (pid: number): ReadonlyArray<string> | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    return stat.slice(stat.lastIndexOf(") ") + 2).split(" ")
  } catch {
    return undefined
  }
}

/** Whether a process with this pid runs (a zombie does not). */
export const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EPERM") return false
  }
  return statFields(pid)?.[0] !== "Z"
}

/** The process's command line, or none where /proc is not available. */
const commandLine = (pid: number): Option.Option<ReadonlyArray<string>> => {
  try {
    return Option.some(readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0"))
  } catch {
    return Option.none()
  }
}

/** Sends a signal; a process that is already gone is fine. */
const signal = (pid: number, name: NodeJS.Signals) => {
  try {
    process.kill(pid, name)
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "ESRCH") throw error
  }
}

const waitForExit = (pid: number, within: Duration.DurationInput) =>
  Effect.suspend(() => (isAlive(pid) ? Effect.fail("running") : Effect.void)).pipe(
    Effect.retry(Schedule.spaced("50 millis").pipe(Schedule.upTo(within))),
    Effect.isSuccess
  )

/** A spawn error as its code with a hint: "EACCES (permission denied)". */
const spawnErrorText = (error: NodeJS.ErrnoException) => {
  const hints: Record<string, string> = {
    EACCES: "permission denied",
    ENOENT: "no such file",
    EPERM: "operation not permitted"
  }
  const code = error.code ?? error.message
  return hints[code] === undefined ? code : `${code} (${hints[code]})`
}

/** The last lines of a server's output, on one line. */
const lastLines = (output: string) =>
  output
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "")
    .slice(-4)
    .join(" | ")

interface Child {
  readonly process: ChildProcess
  readonly spawned: Deferred.Deferred<number, NodeJS.ErrnoException>
  /** How it ended: "exited with code 1", "was killed by SIGKILL". */
  readonly exited: Deferred.Deferred<string>
  /** Its output (stdout and stderr) so far, until `mute()`. */
  readonly output: () => string
  readonly mute: () => void
}

interface SpawnOptions {
  readonly binary: string
  readonly args: ReadonlyArray<string>
  readonly user?: PosixUser | undefined
  readonly cwd?: string | undefined
  readonly env?: NodeJS.ProcessEnv | undefined
  /** Called with the output so far whenever more arrives (until muted). */
  readonly onOutput?: (output: string) => void
}

/** Spawns a process with every listener attached at once, so no event is missed. */
const spawnChild = (options: SpawnOptions): Effect.Effect<Child> =>
  Effect.gen(function* () {
    const spawned = yield* Deferred.make<number, NodeJS.ErrnoException>()
    const exited = yield* Deferred.make<string>()
    return yield* Effect.sync(() => {
      const child = spawn(options.binary, options.args, {
        stdio: ["ignore", "pipe", "pipe"],
        ...(options.user === undefined ? {} : { uid: options.user.uid, gid: options.user.gid }),
        ...(options.cwd === undefined ? {} : { cwd: options.cwd }),
        ...(options.env === undefined ? {} : { env: options.env })
      })
      let output = ""
      let muted = false
      const collect = (chunk: string) => {
        // keep draining (anvil logs every transaction), but only keep what a failure message needs
        if (muted) return
        output = (output + chunk).slice(-16_000)
        options.onOutput?.(output)
      }
      child.stdout?.setEncoding("utf8").on("data", collect)
      child.stderr?.setEncoding("utf8").on("data", collect)
      child.once("spawn", () => Deferred.unsafeDone(spawned, Exit.succeed(child.pid ?? 0)))
      child.on("error", (error) => {
        Deferred.unsafeDone(spawned, Exit.fail(error))
        if (child.pid === undefined) Deferred.unsafeDone(exited, Exit.succeed("never started"))
      })
      child.once("exit", (code, signal) =>
        Deferred.unsafeDone(
          exited,
          Exit.succeed(signal === null ? `exited with code ${code}` : `was killed by ${signal}`)
        )
      )
      return {
        process: child,
        spawned,
        exited,
        output: () => output,
        mute: () => {
          muted = true
          output = ""
        }
      } satisfies Child
    })
  })

const awaitSpawn = (child: Child, server: string, binary: string) =>
  Deferred.await(child.spawned).pipe(
    Effect.mapError(
      (error) =>
        new EmbeddedServerError({
          server,
          path: binary,
          reason: `cannot run it: ${spawnErrorText(error)}`,
          cause: error
        })
    )
  )

/** Runs a command to its end (initdb); a non-zero exit fails with its last output lines. */
export const runToCompletion = (options: SpawnOptions & { readonly server: string }) =>
  Effect.gen(function* () {
    const child = yield* spawnChild(options)
    yield* awaitSpawn(child, options.server, options.binary)
    const ended = yield* Deferred.await(child.exited)
    if (child.process.exitCode !== 0) {
      return yield* new EmbeddedServerError({
        server: options.server,
        path: options.binary,
        reason: `${ended}: ${lastLines(child.output())}`
      })
    }
  })

/**
 * The watchdog: blocks on its stdin (a pipe only this process writes to, never) and, at EOF, sends
 * `signal` to the server, then SIGKILL after `grace` seconds. It signals only the process it was
 * given: same pid and same start time (/proc/<pid>/stat), so a reused pid is never hit. It
 * ignores the terminal's and the process group's signals; the owner dismisses it with SIGKILL.
 */
const WATCHDOG_SCRIPT = `trap '' HUP INT QUIT TERM
while read -r _; do :; done
pid=$1 start=$2 signal=$3 grace=$4
running() {
  if [ "$start" = - ]; then kill -0 "$pid" 2>/dev/null; return; fi
  read -r stat 2>/dev/null <"/proc/$pid/stat" || return 1
  set -- \${stat##*) }
  [ "$1" != Z ] && [ "\${20}" = "$start" ]
}
running || exit 0
kill -s "$signal" "$pid" 2>/dev/null
while [ "$grace" -gt 0 ] && running; do sleep 1; grace=$((grace - 1)); done
if running; then kill -s KILL "$pid"; fi
`

export interface WatchdogOptions {
  readonly pid: number
  readonly signal: NodeJS.Signals
  readonly grace: Duration.DurationInput
  /** Shown in its command line (`ps`), to tell what it watches: the server's command line, say. */
  readonly label: string
}

export interface Watchdog {
  /**
   * Ends the watchdog and waits until it has gone. Call it once `pid` has stopped, so that no hard
   * kill in between leaves `pid` running.
   */
  readonly dismiss: Effect.Effect<void>
}

/** Starts a watchdog that stops `pid` (with `signal`, then SIGKILL) when this process dies. */
export const startWatchdog = (options: WatchdogOptions): Effect.Effect<Watchdog, EmbeddedServerError> =>
  Effect.gen(function* () {
    const start = statFields(options.pid)?.[19] ?? "-"
    const graceSeconds = Math.max(1, Math.ceil(Duration.toSeconds(options.grace)))
    const child = spawn(
      "/bin/sh",
      [
        "-c",
        WATCHDOG_SCRIPT,
        "card-service-watchdog",
        String(options.pid),
        start,
        // `kill -s` takes the name without its SIG prefix
        options.signal.replace(/^SIG/, ""),
        String(graceSeconds),
        options.label
      ],
      { stdio: ["pipe", "ignore", "ignore"] }
    )
    // never written to: its EOF is the message
    child.stdin?.on("error", () => {})
    yield* Effect.async<void, EmbeddedServerError>((resume) => {
      child.once("spawn", () => resume(Effect.void))
      child.on("error", (error) =>
        resume(
          Effect.fail(
            new EmbeddedServerError({
              server: "watchdog",
              path: "/bin/sh",
              reason: `cannot run it: ${spawnErrorText(error)}`,
              cause: error
            })
          )
        )
      )
    })
    const dismiss = Effect.async<void>((resume) => {
      if (child.exitCode !== null || child.signalCode !== null) return resume(Effect.void)
      child.once("exit", () => resume(Effect.void))
      child.kill("SIGKILL")
    })
    return { dismiss }
  })

export interface ServerOptions extends SpawnOptions {
  readonly server: string
  /** The output line that says the server is ready; its match is handed back. */
  readonly ready: RegExp
  readonly readyTimeout: Duration.DurationInput
  /** The signal of an orderly stop (a clean shutdown), then SIGKILL after `stopGrace`. */
  readonly stopSignal: NodeJS.Signals
  readonly stopGrace: Duration.DurationInput
}

export interface RunningServer {
  readonly pid: number
  readonly ready: RegExpExecArray
  /** Completes when the process ends, with how: "exited with code 1", "was killed by SIGKILL". */
  readonly exited: Effect.Effect<string>
}

const stopChild = (child: Child, options: ServerOptions) =>
  Effect.gen(function* () {
    if (child.process.exitCode !== null || child.process.signalCode !== null) return
    child.process.kill(options.stopSignal)
    const stopped = yield* Deferred.await(child.exited).pipe(Effect.timeoutOption(options.stopGrace))
    if (Option.isSome(stopped)) return
    yield* Effect.logWarning(`${options.server} did not stop after ${options.stopSignal}; sending SIGKILL`)
    child.process.kill("SIGKILL")
    yield* Deferred.await(child.exited).pipe(Effect.timeoutOption(options.stopGrace))
  })

/**
 * Spawns a server under a watchdog and waits for its readiness line. It is stopped when the scope
 * closes, and by its watchdog if this process dies first.
 */
export const startServer = (options: ServerOptions): Effect.Effect<RunningServer, EmbeddedServerError, Scope.Scope> =>
  Effect.gen(function* () {
    const ready = yield* Deferred.make<RegExpExecArray>()
    const { child } = yield* Effect.acquireRelease(
      Effect.gen(function* () {
        const child = yield* spawnChild({
          ...options,
          onOutput: (output) => {
            const match = options.ready.exec(output)
            if (match !== null) Deferred.unsafeDone(ready, Exit.succeed(match))
          }
        })
        yield* awaitSpawn(child, options.server, options.binary)
        const guard = yield* startWatchdog({
          pid: child.process.pid ?? 0,
          signal: options.stopSignal,
          grace: options.stopGrace,
          label: [options.binary, ...options.args].join(" ")
        }).pipe(Effect.tapError(() => stopChild(child, options)))
        return { child, guard }
      }),
      ({ child, guard }) => Effect.zipRight(stopChild(child, options), guard.dismiss)
    )
    const failure = (reason: string) =>
      new EmbeddedServerError({ server: options.server, path: options.binary, reason })
    const match = yield* Effect.raceFirst(
      Deferred.await(ready),
      Deferred.await(child.exited).pipe(
        Effect.flatMap((ended) => Effect.fail(failure(`${ended} before it was ready: ${lastLines(child.output())}`)))
      )
    ).pipe(
      Effect.timeoutFail({
        duration: options.readyTimeout,
        onTimeout: () =>
          failure(`not ready within ${Duration.format(options.readyTimeout)}: ${lastLines(child.output())}`)
      })
    )
    child.mute()
    return { pid: child.process.pid ?? 0, ready: match, exited: Deferred.await(child.exited) }
  })

export interface LeftoverOptions {
  readonly server: string
  readonly pid: number
  /** An argument the leftover was started with (its data folder or state file). */
  readonly marker: string
  readonly signal: NodeJS.Signals
  readonly grace: Duration.DurationInput
}

/**
 * Stops a server a previous run left running on our state (a hard kill before the watchdog existed,
 * or a watchdog killed with it). Only a process started with `marker` is signalled; where /proc is
 * not available a live pid is only reported.
 */
export const stopLeftover = (options: LeftoverOptions): Effect.Effect<void, EmbeddedServerError> =>
  Effect.gen(function* () {
    if (!isAlive(options.pid)) return
    const commandArgs = commandLine(options.pid)
    if (Option.isNone(commandArgs)) {
      yield* Effect.logWarning(`pid ${options.pid} recorded for ${options.marker} is alive; not touching it`)
      return
    }
    if (!commandArgs.value.includes(options.marker)) return
    yield* Effect.logWarning(`stopping a ${options.server} left running by a previous run`).pipe(
      Effect.annotateLogs({ pid: options.pid, path: options.marker })
    )
    signal(options.pid, options.signal)
    if (yield* waitForExit(options.pid, options.grace)) return
    signal(options.pid, "SIGKILL")
    if (yield* waitForExit(options.pid, "5 seconds")) return
    return yield* new EmbeddedServerError({
      server: options.server,
      path: options.marker,
      reason: `the ${options.server} left by a previous run (pid ${options.pid}) does not stop`
    })
  })

export interface SupervisionPolicy {
  /**
   * Failures in a row (a restart that did not come up, or a server that exited within `stableAfter`
   * of its start) after which the server is given up.
   */
  readonly maxFailures: number
  /** The pause before the first restart; it doubles after each failure, up to `maxBackoff`. */
  readonly firstBackoff: Duration.DurationInput
  readonly maxBackoff: Duration.DurationInput
  /** A server that ran this long before it exited starts a new count of failures. */
  readonly stableAfter: Duration.DurationInput
}

/** Five restarts within about 6 s of pauses (plus their start times), then the service ends. */
export const DEFAULT_SUPERVISION: SupervisionPolicy = {
  maxFailures: 5,
  firstBackoff: "200 millis",
  maxBackoff: "5 seconds",
  stableAfter: "30 seconds"
}

export interface SuperviseOptions<A extends { readonly exited: Effect.Effect<string> }> {
  readonly server: string
  /** Its data folder or state file, in every line about it. */
  readonly path: string
  /** Starts one incarnation of the server in the given scope: the first, and each restart. */
  readonly start: Effect.Effect<A, EmbeddedServerError, Scope.Scope>
  /** Brings the state back after a restart (the devnet's contracts); a failure counts as a failed restart. */
  readonly recover?: (restarted: A) => Effect.Effect<void, EmbeddedServerError>
  readonly policy?: SupervisionPolicy
}

/**
 * Starts a server and keeps it running while the scope is open. When it exits on its own, one
 * ERROR line names it and how it ended, and it is started again after a pause (the same `start`:
 * same port, same data, so clients reconnect to it), then `recover`ed; one INFO line says it is
 * back. After `maxFailures` failed restarts in a row the service is ended through `ServiceHalt`.
 * Closing the scope stops the supervision first, then the server.
 */
export const superviseServer = <A extends { readonly exited: Effect.Effect<string> }>(
  options: SuperviseOptions<A>
): Effect.Effect<A, EmbeddedServerError, Scope.Scope> =>
  Effect.gen(function* () {
    const policy = options.policy ?? DEFAULT_SUPERVISION
    const annotations = { server: options.server, path: options.path }
    // Incarnations live in a scope closed after the supervising fiber is interrupted (finalizers run
    // in reverse order): a server stopped at shutdown is never taken for one that died.
    const incarnations = yield* Effect.flatMap(Effect.scope, (scope) => Scope.fork(scope, ExecutionStrategy.sequential))
    const incarnation = (recover: boolean) =>
      Effect.gen(function* () {
        const scope = yield* Scope.fork(incarnations, ExecutionStrategy.sequential)
        const started = yield* options.start.pipe(
          Effect.tap((running) => (recover && options.recover !== undefined ? options.recover(running) : Effect.void)),
          Scope.extend(scope),
          Effect.tapError(() => Scope.close(scope, Exit.void))
        )
        return { running: started, scope, startedAt: yield* Clock.currentTimeMillis }
      })
    const backoff = (failures: number) =>
      Duration.min(
        Duration.times(Duration.decode(policy.firstBackoff), 2 ** failures),
        Duration.decode(policy.maxBackoff)
      )

    const lost = (reason: string) =>
      Effect.gen(function* () {
        const error = new EmbeddedServerLost({ ...annotations, reason })
        const halt = yield* Effect.serviceOption(ServiceHalt)
        if (Option.isSome(halt)) return yield* halt.value.halt(error)
        yield* Effect.logError(`${error.message}; it stays down`).pipe(Effect.annotateLogs(annotations))
      })

    /** Watches one incarnation; on its exit, restarts until one is up or too many failed in a row. */
    const watch = (
      current: Effect.Effect.Success<ReturnType<typeof incarnation>>,
      failuresBefore: number
    ): Effect.Effect<void> =>
      Effect.gen(function* () {
        const ended = yield* current.running.exited
        const exitedAt = yield* Clock.currentTimeMillis
        yield* Scope.close(current.scope, Exit.void)
        yield* Effect.logError(`${options.server} exited unexpectedly: it ${ended}; restarting it`).pipe(
          Effect.annotateLogs(annotations)
        )
        const stable = exitedAt - current.startedAt >= Duration.toMillis(policy.stableAfter)
        let failures = stable ? 0 : failuresBefore + 1
        let last = `it ${ended}`
        while (failures < policy.maxFailures) {
          yield* Effect.sleep(backoff(failures))
          const next = yield* Effect.either(incarnation(true))
          if (next._tag === "Right") {
            const downMs = (yield* Clock.currentTimeMillis) - exitedAt
            yield* Effect.logInfo(`${options.server} restarted after ${(downMs / 1000).toFixed(1)} s`).pipe(
              Effect.annotateLogs(annotations)
            )
            return yield* watch(next.right, failures)
          }
          failures++
          last = next.left.reason
          yield* Effect.logWarning(
            `${options.server} did not restart (${failures} of ${policy.maxFailures} failures in a row)`
          ).pipe(Effect.annotateLogs({ ...annotations, reason: last }))
        }
        yield* lost(`${failures} failures in a row; the last: ${last}`)
      })

    const first = yield* incarnation(false)
    yield* Effect.forkScoped(watch(first, 0))
    return first.running
  })
