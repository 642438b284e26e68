import { HashMap, Logger } from "effect"

export interface LogLine {
  readonly level: string
  readonly message: string
  readonly annotations: Readonly<Record<string, unknown>>
}

/**
 * The lines a test server logs, kept for the test: provide `layer` to `testServer(...)` (it logs at
 * WARN and above unless LOG_LEVEL says otherwise). `said` answers those of `level` starting with `prefix`.
 */
export const captureLogs = () => {
  const lines: Array<LogLine> = []
  const layer = Logger.add(
    Logger.make(({ logLevel, message, annotations }) => {
      lines.push({
        level: logLevel.label,
        message: String(Array.isArray(message) ? message[0] : message),
        annotations: Object.fromEntries(HashMap.toEntries(annotations))
      })
    })
  )
  const said = (level: "INFO" | "WARN" | "ERROR", prefix: string) =>
    lines.filter((line) => line.level === level && line.message.startsWith(prefix))
  return { layer, said }
}
