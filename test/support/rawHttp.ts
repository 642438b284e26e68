/**
 * HTTP/1.1 over a bare socket, for requests no client library would send (broken framing, invalid
 * methods, oversize headers, bodies that never arrive). Reads one response, however it ends.
 */
import { connect } from "node:net"
import { Effect } from "effect"

export interface RawResponse {
  /** Undefined when the connection closed (or `wait` passed) without a complete response head. */
  readonly status: number | undefined
  readonly headers: Readonly<Record<string, string>>
  readonly body: string
  /** Whether the server closed the connection. */
  readonly closed: boolean
}

const parse = (received: Buffer, closed: boolean): RawResponse | undefined => {
  // Interim answers (100 Continue) come before the response.
  let data = received
  while (/^HTTP\/1\.[01] 1\d\d /.test(data.subarray(0, 13).toString("latin1")) && data.includes("\r\n\r\n")) {
    data = data.subarray(data.indexOf("\r\n\r\n") + 4)
  }
  const end = data.indexOf("\r\n\r\n")
  if (end < 0) return closed ? { status: undefined, headers: {}, body: "", closed } : undefined
  const [statusLine = "", ...lines] = data.subarray(0, end).toString("latin1").split("\r\n")
  const headers = Object.fromEntries(
    lines.map((line) => [
      line.slice(0, line.indexOf(":")).trim().toLowerCase(),
      line.slice(line.indexOf(":") + 1).trim()
    ])
  )
  const body = data.subarray(end + 4)
  const length = headers["content-length"] === undefined ? undefined : Number(headers["content-length"])
  if (length !== undefined ? body.length < length : !closed) return undefined
  return {
    status: Number(statusLine.split(" ")[1]),
    headers,
    body: body.subarray(0, length ?? body.length).toString("utf8"),
    closed
  }
}

/**
 * Sends `parts` to 127.0.0.1:`port` (a string or bytes is written as is; a number pauses that many
 * ms) and reads the response; gives up after `wait` ms.
 */
export const rawRequest = (port: number, parts: ReadonlyArray<string | Uint8Array | number>, wait = 10_000) =>
  Effect.async<RawResponse>((resume) => {
    let data = Buffer.alloc(0)
    let done = false
    const finish = (closed: boolean) => {
      if (done) return
      const response = parse(data, closed)
      if (response === undefined) return
      done = true
      clearTimeout(timer)
      socket.destroy()
      resume(Effect.succeed(response))
    }
    const socket = connect(port, "127.0.0.1")
    const timer = setTimeout(() => {
      if (done) return
      done = true
      socket.destroy()
      resume(Effect.succeed(parse(data, true) ?? { status: undefined, headers: {}, body: "", closed: false }))
    }, wait)
    socket.on("data", (chunk: Buffer) => {
      data = Buffer.concat([data, chunk])
      finish(false)
    })
    socket.on("close", () => finish(true))
    socket.on("error", () => finish(true))
    socket.on("connect", async () => {
      for (const part of parts) {
        if (done) return
        if (typeof part === "number") await new Promise((resolve) => setTimeout(resolve, part))
        else socket.write(part)
      }
    })
    return Effect.sync(() => {
      done = true
      clearTimeout(timer)
      socket.destroy()
    })
  })
