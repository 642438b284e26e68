/**
 * Server-Sent Events framing (the `text/event-stream` format of the HTML standard), both ways: the
 * server formats frames, clients parse the byte stream back into events. Pure, no I/O.
 */

/** One event as written: its fields, each optional but `data`. */
export interface SseFrame {
  readonly event?: string
  readonly id?: string
  readonly data: string
  /** The reconnection delay the client should use from now on, in ms. */
  readonly retry?: number
}

/** An event as a client dispatches it. */
export interface SseEvent {
  /** The `event:` field, `message` when there was none. */
  readonly event: string
  readonly data: string
  /** The last `id:` seen on the stream so far (the spec's last event ID), "" before any. */
  readonly lastEventId: string
}

const LINE_BREAK = /[\r\n]/

/** A frame's text. `data` may span lines; `event` and `id` may not (nor may `id` hold NUL). */
export const formatFrame = (frame: SseFrame): string => {
  if (frame.event !== undefined && LINE_BREAK.test(frame.event)) throw new Error("an SSE event name is one line")
  if (frame.id !== undefined && (LINE_BREAK.test(frame.id) || frame.id.includes("\0"))) {
    throw new Error("an SSE id is one line without NUL")
  }
  let text = frame.retry === undefined ? "" : `retry: ${Math.max(0, Math.floor(frame.retry))}\n`
  if (frame.event !== undefined) text += `event: ${frame.event}\n`
  if (frame.id !== undefined) text += `id: ${frame.id}\n`
  for (const line of frame.data.split(/\r\n|\r|\n/)) text += `data: ${line}\n`
  return `${text}\n`
}

/** A comment line: clients ignore it; it keeps intermediaries from closing an idle connection. */
export const formatComment = (text: string) => `: ${text.replace(/[\r\n]+/g, " ")}\n\n`

/**
 * An incremental parser: feed it text as it arrives, in chunks of any size (a line or a CRLF may be
 * split between chunks); it answers the events each chunk completes.
 */
export class SseParser {
  private buffer = ""
  private started = false
  /** A CR ended the last chunk: a LF starting the next one belongs to it. */
  private pendingCr = false
  private eventType = ""
  private data: Array<string> = []
  private lastEventId = ""
  /** The last `retry:` the server sent, in ms. */
  retry: number | undefined = undefined

  push(chunk: string): Array<SseEvent> {
    if (chunk === "") return []
    let text = chunk
    if (this.pendingCr && text.startsWith("\n")) text = text.slice(1)
    this.pendingCr = false
    if (!this.started && text.length > 0) {
      this.started = true
      if (text.charCodeAt(0) === 0xfeff) text = text.slice(1)
    }
    this.buffer += text
    const events: Array<SseEvent> = []
    let start = 0
    for (let i = 0; i < this.buffer.length; i++) {
      const c = this.buffer.charCodeAt(i)
      if (c !== 10 && c !== 13) continue
      const line = this.buffer.slice(start, i)
      if (c === 13) {
        if (i + 1 === this.buffer.length) this.pendingCr = true
        else if (this.buffer.charCodeAt(i + 1) === 10) i++
      }
      start = i + 1
      const event = this.line(line)
      if (event !== undefined) events.push(event)
    }
    this.buffer = this.buffer.slice(start)
    return events
  }

  private line(line: string): SseEvent | undefined {
    if (line === "") return this.dispatch()
    if (line.startsWith(":")) return undefined
    const colon = line.indexOf(":")
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? "" : line.slice(colon + 1)
    if (value.startsWith(" ")) value = value.slice(1)
    switch (field) {
      case "event":
        this.eventType = value
        break
      case "data":
        this.data.push(value)
        break
      case "id":
        if (!value.includes("\0")) this.lastEventId = value
        break
      case "retry":
        if (/^[0-9]+$/.test(value)) this.retry = Number(value)
        break
    }
    return undefined
  }

  private dispatch(): SseEvent | undefined {
    const type = this.eventType
    const data = this.data
    this.eventType = ""
    this.data = []
    if (data.length === 0) return undefined
    return { event: type === "" ? "message" : type, data: data.join("\n"), lastEventId: this.lastEventId }
  }
}
