/**
 * The process metrics a Prometheus user expects beside the service's own, named as Prometheus'
 * official client libraries name them (`process_*`, `nodejs_*`), so that the usual dashboards and
 * alerts work unchanged. Read at each scrape; the `/proc` ones only where there is a `/proc`.
 */
import { readdirSync, readFileSync } from "node:fs"
import { monitorEventLoopDelay, performance } from "node:perf_hooks"

interface Sample {
  readonly name: string
  readonly type: "counter" | "gauge"
  readonly help: string
  readonly value: number
  readonly labels?: string
}

/** A /proc reading, or nothing where it cannot be read (not Linux). */
const fromProc = <A>(read: () => A): A | undefined => {
  try {
    return read()
  } catch {
    return undefined
  }
}

/** Virtual memory size: field 23 of /proc/self/stat, counted after the command name. */
const virtualMemoryBytes = () =>
  fromProc(() => {
    const stat = readFileSync("/proc/self/stat", "utf8")
    return Number(stat.slice(stat.lastIndexOf(") ") + 2).split(" ")[20])
  })

const openFds = () => fromProc(() => readdirSync("/proc/self/fd").length)

const maxFds = () =>
  fromProc(() => {
    const line = readFileSync("/proc/self/limits", "utf8")
      .split("\n")
      .find((row) => row.startsWith("Max open files"))
    const soft = line?.slice("Max open files".length).trim().split(/\s+/)[0]
    return soft === undefined || soft === "unlimited" ? undefined : Number(soft)
  })

const render = (samples: ReadonlyArray<Sample>) =>
  samples
    .flatMap(({ help, labels, name, type, value }) => [
      `# HELP ${name} ${help}`,
      `# TYPE ${name} ${type}`,
      `${name}${labels ?? ""} ${value}`
    ])
    .join("\n")
    .concat("\n")

/**
 * Starts watching the event loop's delay (10 ms resolution) and answers the renderer of this
 * process's metrics in Prometheus' text format. The event-loop figures cover the time since the
 * previous scrape.
 */
export const processMetrics = () => {
  const loopDelay = monitorEventLoopDelay({ resolution: 10 })
  loopDelay.enable()
  const startTimeSeconds = performance.timeOrigin / 1000
  return (): string => {
    const cpu = process.cpuUsage()
    const memory = process.memoryUsage()
    const delaySeconds = (nanos: number) => (Number.isFinite(nanos) ? nanos / 1e9 : 0)
    const samples: Array<Sample> = [
      { name: "process_cpu_user_seconds_total", type: "counter", help: "User CPU time spent", value: cpu.user / 1e6 },
      {
        name: "process_cpu_system_seconds_total",
        type: "counter",
        help: "System CPU time spent",
        value: cpu.system / 1e6
      },
      {
        name: "process_cpu_seconds_total",
        type: "counter",
        help: "User and system CPU time spent",
        value: (cpu.user + cpu.system) / 1e6
      },
      {
        name: "process_start_time_seconds",
        type: "gauge",
        help: "Start time of the process since the Unix epoch",
        value: startTimeSeconds
      },
      { name: "process_resident_memory_bytes", type: "gauge", help: "Resident memory size", value: memory.rss },
      { name: "nodejs_heap_size_total_bytes", type: "gauge", help: "V8 heap size", value: memory.heapTotal },
      { name: "nodejs_heap_size_used_bytes", type: "gauge", help: "V8 heap in use", value: memory.heapUsed },
      {
        name: "nodejs_external_memory_bytes",
        type: "gauge",
        help: "Memory of C++ objects bound to JavaScript objects",
        value: memory.external
      },
      {
        name: "nodejs_eventloop_lag_mean_seconds",
        type: "gauge",
        help: "Mean event loop delay since the previous scrape",
        value: delaySeconds(loopDelay.mean)
      },
      {
        name: "nodejs_eventloop_lag_p99_seconds",
        type: "gauge",
        help: "99th percentile of the event loop delay since the previous scrape",
        value: delaySeconds(loopDelay.percentile(99))
      },
      {
        name: "nodejs_eventloop_lag_max_seconds",
        type: "gauge",
        help: "Longest event loop delay since the previous scrape",
        value: delaySeconds(loopDelay.max)
      },
      {
        name: "nodejs_version_info",
        type: "gauge",
        help: "Node.js version",
        value: 1,
        labels: `{version="${process.version}"}`
      }
    ]
    loopDelay.reset()
    const fromLinux: ReadonlyArray<readonly [string, string, number | undefined]> = [
      ["process_virtual_memory_bytes", "Virtual memory size", virtualMemoryBytes()],
      ["process_open_fds", "Open file descriptors", openFds()],
      ["process_max_fds", "Maximum number of open file descriptors", maxFds()]
    ]
    for (const [name, help, value] of fromLinux) {
      if (value !== undefined && Number.isFinite(value)) samples.push({ name, type: "gauge", help, value })
    }
    return render(samples)
  }
}
