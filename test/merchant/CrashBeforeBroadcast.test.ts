/**
 * SIGKILL between recording a transaction and broadcasting it. The service reaches the devnet
 * through a JSON-RPC proxy that swallows `eth_sendRawTransaction` (never answered, never sent), so
 * the relayer's transaction is recorded with its nonce and the node never sees it; the service is
 * killed while it waits. Restarted on the devnet directly, the relayer takes its next nonce from the
 * chain and sends the recorded transaction first: the killed payment is paid with it, every later
 * payment settles (no nonce gap holds them), and nothing is sent twice.
 */
import { createServer } from "node:http"
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, type Hex, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { freePort } from "../../src/embedded/EmbeddedPostgres.js"
import { callService, devnetServiceEnv, type ServiceProcess, startService, stopService } from "../support/process.js"
import { devnetWithDatabase, usd1TransfersTo } from "../support/TestChain.js"
import { queryDatabase as query } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"
import { signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[6]!)

/** A JSON-RPC proxy to `target` that never answers (nor forwards) a raw transaction. */
const swallowingBroadcasts = (target: string) =>
  Effect.acquireRelease(
    Effect.gen(function* () {
      const port = yield* freePort
      const server = createServer((request, response) => {
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () => {
          const body = Buffer.concat(chunks).toString("utf8")
          if (body.includes("eth_sendRawTransaction")) return
          fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body })
            .then(async (answer) => {
              response.writeHead(answer.status, { "content-type": "application/json" })
              response.end(await answer.text())
            })
            .catch(() => response.destroy())
        })
      })
      yield* Effect.async<void>((resume) => {
        server.listen(port, "127.0.0.1", () => resume(Effect.void))
      })
      return { server, url: `http://127.0.0.1:${port}` }
    }),
    ({ server }) =>
      Effect.sync(() => server.closeAllConnections()).pipe(Effect.zipRight(Effect.sync(() => server.close())))
  )

const pay = (service: ServiceProcess, amount: string) =>
  Effect.gen(function* () {
    const order = (yield* callService(service, "POST", "/merchant/orders", { json: { amount, description: "crash" } }))
      .body
    const offer = yield* callService(service, "GET", `/merchant/orders/${order.id}/pay`)
    const payment = yield* Effect.promise(() => signPayment(payer, offer.body))
    return {
      id: order.id as string,
      answer: callService(service, "POST", `/merchant/orders/${order.id}/pay`, {
        headers: { "payment-signature": payment.header }
      })
    }
  })

describe("a crash between recording a transaction and broadcasting it", () => {
  it.live(
    "after restart the recorded transaction goes first, later payments settle, nothing is sent twice",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        const proxy = yield* swallowingBroadcasts(devnet.rpcUrl)
        const settings = { MERCHANT_PAY_TO: merchant.address, RECONCILE_INTERVAL: "200 millis", LOG_LEVEL: "Info" }
        const first = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, settings, proxy.url))
        const crashed = yield* pay(first, "3")
        yield* Effect.forkDaemon(crashed.answer)
        const [recorded] = yield* eventually(
          "the transaction to be recorded",
          query(databaseUrl, "SELECT tx_hash, nonce FROM relayed_transactions"),
          (rows) => rows.length === 1
        )
        expect(yield* stopService(first, "SIGKILL")).toBe(null)
        const client = createPublicClient({ transport: http(devnet.rpcUrl) })
        const tx = recorded!.tx_hash as Hex
        expect(yield* Effect.promise(() => client.getTransaction({ hash: tx }).catch(() => null))).toBe(null)

        const second = yield* startService(yield* devnetServiceEnv(devnet, databaseUrl, settings))
        const later = yield* Effect.forEach(["4", "5", "6"], (amount) =>
          Effect.flatMap(pay(second, amount), ({ answer }) => answer)
        )
        expect(later.map((answer) => [answer.status, answer.body?.status])).toEqual([
          [200, "paid"],
          [200, "paid"],
          [200, "paid"]
        ])
        const paid = yield* eventually(
          "the crashed payment to be paid",
          callService(second, "GET", `/merchant/orders/${crashed.id}`),
          (answer) => answer.body?.status === "paid",
          { explain: () => second.output().slice(-5000) }
        )
        // paid with the very transaction recorded before the crash, at its nonce
        expect(paid.body.tx).toBe(tx)
        const mined = yield* Effect.promise(() => client.getTransaction({ hash: tx }))
        expect(mined.nonce).toBe(Number(recorded!.nonce))
        const transfers = yield* usd1TransfersTo(devnet, merchant.address)
        expect(transfers).toHaveLength(4)
        expect(new Set(transfers.map((log) => log.transactionHash)).size).toBe(4)
        expect(second.output()).toContain("relayer nonce gap")
        expect(yield* stopService(second, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    240_000
  )
})
