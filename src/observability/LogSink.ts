/**
 * JSON log lines, written to stdout in batches. A write to stdout is a system call (synchronous for
 * files and pipes on Linux), and one per line was the largest single cost of a request's access
 * log; lines are collected and written together within FLUSH_MS, at once when MAX_BUFFERED
 * characters wait, and synchronously when the process exits (also through `process.exit` and an
 * uncaught exception), so no line is lost at exit and their order is kept.
 */
import { Logger } from "effect"

/** How long a line may wait for others before it is written. */
const FLUSH_MS = 20
/** Past this many characters waiting, the lines are written at once. */
const MAX_BUFFERED = 64 * 1024

let waiting: Array<string> = []
let waitingChars = 0
let timer: ReturnType<typeof setTimeout> | undefined

/** Writes every waiting line now. */
export const flushLogLines = () => {
  if (timer !== undefined) {
    clearTimeout(timer)
    timer = undefined
  }
  if (waiting.length === 0) return
  const text = `${waiting.join("\n")}\n`
  waiting = []
  waitingChars = 0
  process.stdout.write(text)
}

/** Queues one line (without its newline). */
export const writeLogLine = (line: string) => {
  waiting.push(line)
  waitingChars += line.length
  if (waitingChars >= MAX_BUFFERED) flushLogLines()
  // Unreferenced: a quiet process is not kept alive for its logs; the exit hook writes them.
  else if (timer === undefined) timer = setTimeout(flushLogLines, FLUSH_MS).unref()
}

process.on("exit", flushLogLines)

/** Effect's JSON logger (the same lines as `Logger.json`), written through the batch. */
export const jsonLineLogger = Logger.map(Logger.jsonLogger, writeLogLine)

/** Replaces the default logger with `jsonLineLogger`. */
export const JsonLogLive = Logger.replace(Logger.defaultLogger, jsonLineLogger)
