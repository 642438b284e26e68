/**
 * Peer of the authorize benchmark: a bare `node:http` server with a `pg` pool as large as the
 * service's (10), answering the card network's Auth Stream Access requests on
 * `POST /card-network/messages` as the service does, on the same database and tables:
 *
 * - verifies the Standard Webhooks signature over the raw body (HMAC-SHA256 of
 *   `webhook-id.webhook-timestamp.body` with the `whsec_` secret's key, compared in constant time,
 *   a timestamp within 5 minutes), 401 otherwise;
 * - reads the request's token, card token, cardholder amount (cents) and merchant from the JSON;
 * - decides and stores the hold in ONE statement: the card's row locked (FOR UPDATE, not frozen),
 *   the wallet's balance within its spending allowance (`card_wallet_balances`, trusted while
 *   `card_balance_follower.checked_at` is within BALANCE_MAX_AGE_MS), less the open holds and the cleared amounts not debited, compared
 *   with the amount, and the authorization inserted into `card_authorizations` approved (holding
 *   the amount) or declined;
 * - answers Lithic's ASA response `{token, result, balance: {amount, available}}` (cents).
 *
 * What it leaves out of the service's work: the holder's limits (spent today and this month), the
 * idempotency look-ups (a re-delivered message, an increment), the holder's `authorization` event,
 * the budget and the stand-in, metrics, traces and the access log. Under READ COMMITTED its one
 * statement's snapshot predates a wait for the card's lock, so two requests on one card at once may
 * both miss the other's hold; the bench's amounts are far below every card's funds, so no answer
 * depends on it here.
 *
 * Run by the benchmark as plain JavaScript (see harness.ts): package imports only.
 * Environment: PORT, DATABASE_URL, CARD_SECRET (`whsec_`…), BALANCE_MAX_AGE_MS (default 30000),
 * ATOMIC_PER_MICRO (USD1 atomic units per millionth of a dollar, default 10^12: 18 decimals).
 */
import { createHmac, timingSafeEqual } from "node:crypto"
import { createServer, type IncomingMessage, type ServerResponse } from "node:http"
import pg from "pg"

const secret = process.env.CARD_SECRET ?? ""
if (!secret.startsWith("whsec_")) throw new Error("CARD_SECRET must be a whsec_ secret")
const key = Buffer.from(secret.slice("whsec_".length), "base64")
const maxAge = `${Number(process.env.BALANCE_MAX_AGE_MS ?? 30_000)} milliseconds`
const atomicPerMicro = process.env.ATOMIC_PER_MICRO ?? "1000000000000"
const TOLERANCE_MS = 5 * 60 * 1000

const pool = new pg.Pool({ connectionString: process.env.DATABASE_URL, max: 10 })
await pool.query("SELECT 1")

/** The hold, decided and stored in one statement. */
const AUTHORIZE = `
  WITH card AS (
    SELECT id, address FROM cards WHERE issuer_ref = $1 AND NOT frozen FOR UPDATE
  ), funds AS (
    SELECT card.id, card.address,
      (SELECT div(least(b.usd1, b.allowance), $2::numeric)::bigint FROM card_wallet_balances b
        WHERE b.address = card.address) AS balance,
      coalesce((SELECT checked_at > now() - $3::interval FROM card_balance_follower), false) AS fresh,
      (SELECT coalesce(sum(a.held_micros), 0) FROM card_authorizations a
        WHERE a.card_id = card.id AND a.held_micros > 0 AND a.hold_expires_at > now())
      + (SELECT coalesce(sum(e.amount_micros), 0) FROM card_network_events e
        WHERE e.card_id = card.id AND e.money = 'debit_pending') AS committed
    FROM card
  ), decided AS (
    SELECT funds.*, coalesce(fresh AND balance - committed >= $4::bigint, false) AS ok FROM funds
  ), held AS (
    INSERT INTO card_authorizations (id, card_id, address, network, message_id, approved, reason, requested_micros,
      approved_micros, held_micros, available_after_micros, status, merchant_name, merchant_mcc, merchant_city,
      merchant_country, channel, created_at, updated_at, hold_expires_at)
    SELECT $5, id, address, 'sandbox', $6, ok,
      CASE WHEN ok THEN NULL WHEN balance IS NULL OR NOT fresh THEN 'funds_unknown' ELSE 'insufficient_funds' END,
      $4::bigint, CASE WHEN ok THEN $4::bigint ELSE 0 END, CASE WHEN ok THEN $4::bigint ELSE 0 END,
      greatest(balance - committed - CASE WHEN ok THEN $4::bigint ELSE 0 END, 0),
      CASE WHEN ok THEN 'pending' ELSE 'declined' END,
      $7, $8, $9, $10, $11, now(), now(), now() + interval '7 days'
    FROM decided
    RETURNING approved, reason, available_after_micros
  )
  SELECT held.approved, held.reason, held.available_after_micros::text AS available, decided.balance::text AS balance
  FROM held, decided`

interface Decided {
  readonly approved: boolean
  readonly reason: string | null
  readonly available: string | null
  readonly balance: string | null
}

/** Lithic's result code of a decline reason (as the service's LithicWire.asaResult maps them). */
const resultOf = (row: Decided | undefined) =>
  row === undefined
    ? "CARD_PAUSED"
    : row.approved
      ? "APPROVED"
      : row.reason === "insufficient_funds" || row.reason === "funds_unknown"
        ? "INSUFFICIENT_FUNDS"
        : "CARD_PAUSED"

const send = (res: ServerResponse, status: number, body: string) => {
  res.writeHead(status, { "content-type": "application/json", "content-length": Buffer.byteLength(body) })
  res.end(body)
}

const header = (req: IncomingMessage, name: string) => {
  const value = req.headers[name]
  return typeof value === "string" ? value.trim() : undefined
}

const verified = (req: IncomingMessage, body: Buffer) => {
  const id = header(req, "webhook-id")
  const timestamp = header(req, "webhook-timestamp")
  const signatures = header(req, "webhook-signature")
  if (!id || !timestamp || !signatures || !/^\d{1,12}$/.test(timestamp)) return false
  const expected = createHmac("sha256", key).update(`${id}.${timestamp}.`, "utf8").update(body).digest()
  const matches = signatures.split(" ").some((item) => {
    const [version, encoded] = item.split(",", 2)
    if (version !== "v1" || encoded === undefined) return false
    const given = Buffer.from(encoded, "base64")
    return given.length === expected.length && timingSafeEqual(given, expected)
  })
  return matches && Math.abs(Date.now() - Number(timestamp) * 1000) <= TOLERANCE_MS ? id : false
}

interface AsaRequest {
  readonly token?: unknown
  readonly amount?: unknown
  readonly amounts?: { readonly cardholder?: { readonly amount?: unknown } }
  readonly card?: { readonly token?: unknown }
  readonly merchant?: {
    readonly descriptor?: unknown
    readonly mcc?: unknown
    readonly city?: unknown
    readonly country?: unknown
  }
  readonly pos?: { readonly entry_mode?: { readonly card?: unknown } }
}

const text = (value: unknown) => (typeof value === "string" && value.length > 0 ? value : undefined)

const authorize = (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
  const messageId = verified(req, body)
  if (messageId === false) {
    return send(res, 401, JSON.stringify({ error: "invalid signature", code: "NETWORK_SIGNATURE_INVALID" }))
  }
  let asa: AsaRequest
  try {
    asa = JSON.parse(body.toString("utf8")) as AsaRequest
  } catch {
    return send(res, 400, JSON.stringify({ error: "malformed", code: "NETWORK_MESSAGE_MALFORMED" }))
  }
  const token = text(asa.token)
  const cardToken = text(asa.card?.token)
  const cents = asa.amounts?.cardholder?.amount ?? asa.amount
  const merchant = asa.merchant
  if (
    token === undefined ||
    cardToken === undefined ||
    typeof cents !== "number" ||
    !Number.isInteger(cents) ||
    text(merchant?.descriptor) === undefined ||
    typeof merchant?.mcc !== "string" ||
    !/^\d{4}$/.test(merchant.mcc) ||
    text(merchant.country) === undefined
  ) {
    return send(res, 400, JSON.stringify({ error: "malformed", code: "NETWORK_MESSAGE_MALFORMED" }))
  }
  const micros = (BigInt(Math.abs(cents)) * 10_000n).toString()
  pool
    .query<Decided>(AUTHORIZE, [
      cardToken,
      atomicPerMicro,
      maxAge,
      micros,
      token,
      messageId,
      merchant.descriptor,
      merchant.mcc,
      text(merchant.city) ?? null,
      merchant.country,
      asa.pos?.entry_mode?.card === "NOT_PRESENT" ? "online" : "in_person"
    ])
    .then(
      ({ rows }) => {
        const row = rows[0]
        send(
          res,
          200,
          JSON.stringify({
            token,
            result: resultOf(row),
            ...(row?.balance != null && row.available != null
              ? {
                  balance: {
                    amount: Number(BigInt(row.balance) / 10_000n),
                    available: Number(BigInt(row.available) / 10_000n)
                  }
                }
              : {})
          })
        )
      },
      () => send(res, 500, JSON.stringify({ error: "internal server error", code: "INTERNAL" }))
    )
}

const server = createServer((req, res) => {
  if (req.method === "GET" && req.url === "/health") return send(res, 200, JSON.stringify({ status: "ok" }))
  if (req.method !== "POST" || req.url !== "/card-network/messages") {
    return send(res, 404, JSON.stringify({ error: "not found", code: "NOT_FOUND" }))
  }
  const chunks: Array<Buffer> = []
  req.on("data", (chunk: Buffer) => chunks.push(chunk))
  req.on("end", () => authorize(req, res, Buffer.concat(chunks)))
})
server.listen(Number(process.env.PORT), "127.0.0.1")

process.once("SIGTERM", () => {
  server.close()
  server.closeIdleConnections()
  void pool.end()
})
