/**
 * Exactly once across processes and crashes: the real service as separate processes over one
 * database and one devnet.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { createPublicClient, erc20Abi, type Hex, http } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS, type Devnet } from "../../src/chain/Devnet.js"
import { callService, devnetServiceEnv, type ServiceProcess, startService, stopService } from "../support/process.js"
import { devnetWithDatabase, devnetRpc as rpc, usd1TransfersTo } from "../support/TestChain.js"
import { queryDatabase as query } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"
import { expectWorth, type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())

const serviceEnv = (devnet: Devnet, databaseUrl: string) =>
  devnetServiceEnv(devnet, databaseUrl, {
    MERCHANT_PAY_TO: merchant.address,
    RECONCILE_INTERVAL: "200 millis",
    SETTLEMENT_RECONCILE_AFTER: "1 second",
    LOG_LEVEL: "Info"
  })

const merchantBalance = (devnet: Devnet) =>
  Effect.promise(() =>
    createPublicClient({ transport: http(devnet.rpcUrl) }).readContract({
      address: devnet.usd1,
      abi: erc20Abi,
      functionName: "balanceOf",
      args: [merchant.address]
    })
  )

const newOrder = (service: ServiceProcess, amount: string) =>
  Effect.gen(function* () {
    const order = yield* callService(service, "POST", "/merchant/orders", {
      json: { amount, description: "replica test" }
    })
    expect(order.status).toBe(200)
    const unpaid = yield* callService(service, "GET", `/merchant/orders/${order.body.id}/pay`)
    expect(unpaid.status).toBe(402)
    return { id: order.body.id as string, offer: unpaid.body as Offer }
  })

const waitUntilPaid = (service: ServiceProcess, id: string) =>
  eventually(
    `order ${id} to be paid`,
    callService(service, "GET", `/merchant/orders/${id}`),
    (response) => response.body?.status === "paid",
    {
      explain: () =>
        service
          .output()
          .split("\n")
          .filter((line) => !line.includes("Sent HTTP response"))
          .join("\n")
          .slice(-12000)
    }
  )

describe("settlement across processes", () => {
  it.live(
    "20 concurrent payments split over two server processes settle once",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        const first = yield* startService(yield* serviceEnv(devnet, databaseUrl))
        // Behind one public URL, as replicas are: a payment names the order's URL there.
        const second = yield* startService({ ...(yield* serviceEnv(devnet, databaseUrl)), API_URL: first.baseUrl })
        yield* Effect.addFinalizer(() =>
          Effect.all([stopService(first, "SIGTERM"), stopService(second, "SIGTERM")], { concurrency: 2 })
        )
        const order = yield* newOrder(first, "4.2")
        const payers = [1, 2, 3, 4].map((i) => privateKeyToAccount(ANVIL_ACCOUNT_KEYS[i]!))
        const payments = yield* Effect.promise(() =>
          Promise.all(Array.from({ length: 20 }, (_, i) => signPayment(payers[i % 4]!, order.offer)))
        )
        const responses = yield* Effect.all(
          payments.map((payment, i) =>
            callService(i % 2 === 0 ? first : second, "POST", `/merchant/orders/${order.id}/pay`, {
              headers: { "payment-signature": payment.header }
            })
          ),
          { concurrency: "unbounded" }
        )
        // The winner answers 200, or 202 when its settlement outlasts SETTLEMENT_WAIT on a slow machine.
        expect(responses.filter((r) => r.status === 200 || r.status === 202)).toHaveLength(1)
        expect(responses.filter((r) => r.status === 409)).toHaveLength(19)
        yield* waitUntilPaid(first, order.id)
        expect(yield* usd1TransfersTo(devnet, merchant.address)).toHaveLength(1)
        expectWorth(yield* merchantBalance(devnet), "4.2")
        const rows = yield* query(databaseUrl, "SELECT status FROM settlements WHERE order_id = $1", [order.id])
        expect(rows.map((row) => row.status)).toEqual(["succeeded"])
      }).pipe(Effect.scoped),
    300_000
  )

  it.live(
    "a server killed after broadcast is reconciled on restart: paid once, also when the transaction was lost",
    () =>
      Effect.gen(function* () {
        const { devnet, databaseUrl } = yield* devnetWithDatabase
        const env = yield* serviceEnv(devnet, databaseUrl)
        const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[5]!)

        /** Pays with mining off, kills the server once the settlement is recorded as broadcast. */
        const payThenKill = (service: ServiceProcess, id: string, offer: Offer) =>
          Effect.gen(function* () {
            yield* rpc(devnet, "evm_setAutomine", [false])
            const payment = yield* Effect.promise(() => signPayment(payer, offer))
            // The response never comes: the server dies while waiting for the receipt.
            yield* Effect.forkDaemon(
              Effect.tryPromise(() =>
                fetch(`${service.baseUrl}/merchant/orders/${id}/pay`, {
                  method: "POST",
                  headers: { "payment-signature": payment.header }
                })
              ).pipe(Effect.ignore)
            )
            const broadcast = yield* eventually(
              `the settlement of order ${id} to be broadcast`,
              query(databaseUrl, "SELECT tx_hash FROM settlements WHERE order_id = $1 AND status = 'broadcast'", [id]),
              (rows) => rows.length === 1
            )
            expect(yield* stopService(service, "SIGKILL")).toBe(null)
            return broadcast[0]!.tx_hash as Hex
          })

        // 1. The broadcast transaction is mined while the server is down.
        let service = yield* startService(env)
        const mined = yield* newOrder(service, "9")
        const minedTx = yield* payThenKill(service, mined.id, mined.offer)
        yield* rpc(devnet, "evm_setAutomine", [true])
        yield* rpc(devnet, "evm_mine")
        service = yield* startService(env)
        const paid = yield* waitUntilPaid(service, mined.id)
        expect(paid.body.tx).toBe(minedTx)
        expect(yield* usd1TransfersTo(devnet, merchant.address)).toHaveLength(1)

        // 2. The broadcast transaction is lost (dropped from the pool): the restart re-broadcasts it.
        const lost = yield* newOrder(service, "11")
        const lostTx = yield* payThenKill(service, lost.id, lost.offer)
        yield* rpc(devnet, "anvil_dropAllTransactions")
        yield* rpc(devnet, "evm_setAutomine", [true])
        service = yield* startService(env)
        const repaid = yield* waitUntilPaid(service, lost.id)
        expect(repaid.body.tx).toBe(lostTx)
        expect(yield* usd1TransfersTo(devnet, merchant.address)).toHaveLength(2)
        expectWorth(yield* merchantBalance(devnet), "20", 2)
        expect(yield* stopService(service, "SIGTERM")).toBe(0)
      }).pipe(Effect.scoped),
    300_000
  )
})
