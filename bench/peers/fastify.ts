/**
 * Peer of the read benchmark: the framework a user would otherwise pick, Fastify 5 with its
 * defaults (no logger) and a `pg` pool as large as the service's (10). `GET /merchant/orders/:id`
 * runs the same SELECT as the bare peer on the same database and answers the same JSON (404 with
 * `{error, code}` for an unknown order); `GET /health` a constant JSON. Connects to the database
 * before it listens, as the service does.
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): packages, and pure modules of src/.
 * Environment: PORT, DATABASE_URL.
 */
import Fastify from "fastify"
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

const app = Fastify()

app.get("/health", async () => ({ status: "ok" }))

app.get<{ Params: { id: string } }>("/merchant/orders/:id", async (request, reply) => {
  const { rows } = await pool.query<OrderRow>("SELECT * FROM orders WHERE id = $1", [request.params.id])
  const row = rows[0]
  if (row === undefined)
    return reply.code(404).send({ error: `no order ${request.params.id}`, code: "ORDER_NOT_FOUND" })
  return orderFields({ ...row, createdAt: row.created_at, expiresAt: row.expires_at })
})

await app.listen({ port: Number(process.env.PORT), host: "127.0.0.1" })

process.once("SIGTERM", () => {
  void app.close().then(() => pool.end())
})
