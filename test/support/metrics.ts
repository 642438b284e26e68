import { Effect, Metric } from "effect"
import { prometheusText } from "../../src/observability/Metrics.js"

/**
 * The value of one series of this process's metrics, named as Prometheus prints it (`name{label="v"}`);
 * 0 before it is first written. Metrics are shared by the tests of a worker: compare growth.
 */
export const metricValue = (series: string) =>
  Effect.map(Metric.snapshot, (pairs) => {
    const line = prometheusText(pairs)
      .split("\n")
      .find((text) => text.startsWith(`${series} `))
    return Number(line?.split(" ")[1] ?? 0)
  })
