/** The suite's figures, collected by each scenario and printed as one table at the end. */
const rows: Array<readonly [string, string]> = []

export const record = (name: string, value: string | number) => {
  rows.push([name, String(value)])
}

export const table = () => {
  const width = Math.max(...rows.map(([name]) => name.length), 6)
  const valueWidth = Math.max(...rows.map(([, value]) => value.length), 5)
  const line = `+${"-".repeat(width + 2)}+${"-".repeat(valueWidth + 2)}+`
  return [
    line,
    `| ${"figure".padEnd(width)} | ${"value".padStart(valueWidth)} |`,
    line,
    ...rows.map(([name, value]) => `| ${name.padEnd(width)} | ${value.padStart(valueWidth)} |`),
    line
  ].join("\n")
}
