/**
 * Peer of the events benchmark: a bare `node:http` server doing the core of GET /me/events and
 * nothing else. The bearer token's session is looked up by its SHA-256 in `sessions`; the stream
 * starts after the user's newest event; one connection LISTENs on the service's channel, and each
 * notification reads the user's events after each of its streams' position from `events` (one
 * query per stream) and writes them as SSE frames. No heartbeat, limits, resume checks, metrics,
 * logs or backpressure bound.
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): package imports only.
 * Environment: PORT, DATABASE_URL.
 */
import { createHash } from "node:crypto"
import { createServer, type ServerResponse } from "node:http"
import pg from "pg"

interface Stream {
  cursor: number
  readonly res: ServerResponse
  reading: boolean
  again: boolean
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
const listener = new pg.Client({ connectionString: process.env.DATABASE_URL })
await listener.connect()
await listener.query("LISTEN card_service_events")

const byUser = new Map<string, Set<Stream>>()

/** Sends the stream everything after its position, reading again while more may be there. */
const pump = async (address: string, stream: Stream) => {
  if (stream.reading) {
    stream.again = true
    return
  }
  stream.reading = true
  try {
    do {
      stream.again = false
      const { rows } = await pool.query<{ id: string; type: string; data: string }>(
        "SELECT id::text AS id, type, data::text AS data FROM events WHERE address = $1 AND id > $2 ORDER BY id LIMIT 200",
        [address, stream.cursor]
      )
      let text = ""
      for (const row of rows) {
        text += `event: ${row.type}\nid: ${row.id}\ndata: ${row.data}\n\n`
        stream.cursor = Number(row.id)
      }
      if (text !== "") stream.res.write(text)
      if (rows.length === 200) stream.again = true
    } while (stream.again)
  } finally {
    stream.reading = false
  }
}

listener.on("notification", (message) => {
  const [kind, address, id] = (message.payload ?? "").split(" ")
  if (kind !== "e" || address === undefined) return
  for (const stream of byUser.get(address) ?? []) {
    if (stream.cursor < Number(id)) void pump(address, stream)
  }
})

const server = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/health") {
    res.writeHead(200, { "content-type": "application/json" })
    return res.end('{"status":"ok"}')
  }
  const token = /^Bearer (.+)$/.exec(req.headers.authorization ?? "")?.[1]
  if (req.method !== "GET" || req.url !== "/me/events" || token === undefined) {
    res.writeHead(404)
    return res.end()
  }
  const hash = createHash("sha256").update(token, "utf8").digest()
  void (async () => {
    const session = await pool.query<{ address: string }>(
      "SELECT address FROM sessions WHERE token_hash = $1 AND expires_at > now()",
      [hash]
    )
    const address = session.rows[0]?.address
    if (address === undefined) {
      res.writeHead(401)
      return res.end()
    }
    const last = await pool.query<{ lastId: string }>(
      'SELECT last_id::text AS "lastId" FROM event_sequences WHERE address = $1',
      [address]
    )
    const cursor = Number(last.rows[0]?.lastId ?? 0)
    res.writeHead(200, { "content-type": "text/event-stream", "cache-control": "no-store" })
    res.write(`event: ready\nid: ${cursor}\ndata: {"lastEventId":${cursor}}\n\n`)
    const stream: Stream = { cursor, res, reading: false, again: false }
    const streams = byUser.get(address) ?? new Set()
    streams.add(stream)
    byUser.set(address, streams)
    res.on("close", () => {
      streams.delete(stream)
      if (streams.size === 0) byUser.delete(address)
    })
    void pump(address, stream)
  })().catch(() => {
    if (!res.headersSent) res.writeHead(500)
    res.end()
  })
})
server.listen(Number(process.env.PORT), "127.0.0.1")

process.once("SIGTERM", () => {
  server.close()
  server.closeAllConnections()
  void listener.end()
  void pool.end()
})
