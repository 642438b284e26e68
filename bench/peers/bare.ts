/**
 * Peer of the read and health benchmarks: a bare `node:http` server with a `pg` pool as large as
 * the service's (10). `GET /health` answers a constant JSON; `GET /merchant/orders/{id}` runs the
 * same SELECT as the service on the same database and answers the same JSON shape. Connects to
 * the database before it listens, as the service does.
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): packages, and pure modules of src/.
 * Environment: PORT, DATABASE_URL.
 */
import { createServer, type ServerResponse } from "node:http"
import pg from "pg"
import { orderFields } from "../../src/merchant/OrderJson.js"

interface OrderRow {
  readonly id: string
  readonly amount: string
  readonly description: string
  readonly status: string
  readonly payer: string | null
  readonly tx: string | null
  readonly created_at: Date
  readonly expires_at: Date
}

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
await pool.query("SELECT 1")

const health = JSON.stringify({ status: "ok" })
const orderPath = /^\/merchant\/orders\/([A-Za-z0-9_-]{1,64})$/

const send = (res: ServerResponse, status: number, body: string) => {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const orderJson = (row: OrderRow) =>
  JSON.stringify(orderFields({ ...row, createdAt: row.created_at, expiresAt: row.expires_at }))

const server = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/health") return send(res, 200, health)
  const id = req.method === "GET" ? orderPath.exec(req.url ?? "")?.[1] : undefined
  if (id === undefined) return send(res, 404, JSON.stringify({ error: "not found", code: "NOT_FOUND" }))
  pool.query<OrderRow>("SELECT * FROM orders WHERE id = $1", [id]).then(
    ({ rows }) =>
      rows[0] === undefined
        ? send(res, 404, JSON.stringify({ error: `no order ${id}`, code: "ORDER_NOT_FOUND" }))
        : send(res, 200, orderJson(rows[0])),
    () => send(res, 500, JSON.stringify({ error: "internal server error", code: "INTERNAL" }))
  )
})
server.listen(Number(process.env.PORT), "127.0.0.1")

process.once("SIGTERM", () => {
  server.close()
  server.closeIdleConnections()
  void pool.end()
})
