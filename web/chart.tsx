/**
 * The portfolio chart: one group of bars per holding, its weight beside its target (Chart.js, a
 * chunk of its own loaded with the agent screen). The canvas is an image to assistive technology,
 * described by its label; the table beside it holds the same numbers.
 */
import { BarController, BarElement, CategoryScale, Chart, Legend, LinearScale, Tooltip } from "chart.js"
import { useEffect, useRef } from "preact/hooks"

Chart.register(BarController, BarElement, CategoryScale, LinearScale, Legend, Tooltip)

export interface ChartHolding {
  readonly symbol: string
  readonly weight: number
  readonly target: number
}

const WEIGHT_COLOUR = "#1d4ed8"
const TARGET_COLOUR = "#b45309"

export const PortfolioChart = (props: { readonly holdings: ReadonlyArray<ChartHolding> }) => {
  const canvas = useRef<HTMLCanvasElement>(null)
  const chart = useRef<Chart<"bar"> | null>(null)

  useEffect(() => {
    if (canvas.current === null) return
    chart.current = new Chart(canvas.current, {
      type: "bar",
      data: { labels: [], datasets: [] },
      options: {
        animation: false,
        responsive: true,
        maintainAspectRatio: false,
        scales: {
          y: {
            beginAtZero: true,
            ticks: { callback: (value) => `${value} %` },
            title: { display: true, text: "% of the wallet" }
          }
        },
        plugins: { legend: { position: "bottom" } }
      }
    })
    return () => chart.current?.destroy()
  }, [])

  useEffect(() => {
    const current = chart.current
    if (current === null || canvas.current === null) return
    current.data.labels = props.holdings.map((holding) => holding.symbol)
    current.data.datasets = [
      {
        label: "Weight",
        data: props.holdings.map((holding) => Number((holding.weight * 100).toFixed(2))),
        backgroundColor: WEIGHT_COLOUR
      },
      {
        label: "Target",
        data: props.holdings.map((holding) => Number((holding.target * 100).toFixed(2))),
        backgroundColor: TARGET_COLOUR
      }
    ]
    current.update()
    // What the chart drew, for tests and tools: bars per series.
    canvas.current.dataset.bars = current.data.datasets
      .map((_, index) => current.getDatasetMeta(index).data.length)
      .join(",")
  }, [props.holdings])

  const summary = props.holdings
    .map(
      (holding) =>
        `${holding.symbol} ${(holding.weight * 100).toFixed(1)} % (target ${(holding.target * 100).toFixed(1)} %)`
    )
    .join(", ")
  return (
    <div class="chart">
      <canvas ref={canvas} id="portfolio-chart" role="img" aria-label={`Weights against targets: ${summary}`} />
    </div>
  )
}
