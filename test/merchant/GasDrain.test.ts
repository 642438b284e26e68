/**
 * The relayer never pays gas for a payment that cannot succeed (issue 25, the gas drain): a payer
 * funded for one order who sends ten payments at once gets one settled and nine refused with 402,
 * nothing else is broadcast, and the relayer's gas spent is that one transfer's. What the chain
 * still reverts (the payer spending its balance while our transaction waits in the pool) is
 * counted and logged with the payer. On the real devnet.
 */
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { Effect, Fiber, Layer } from "effect"
import { createPublicClient, createWalletClient, erc20Abi, type Hex, http, parseEther, parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import { mintUsd1 } from "../../src/chain/DevnetOperator.js"
import { send } from "../support/http.js"
import { captureLogs } from "../support/logs.js"
import { promtoolProblems, withoutPromtool } from "../support/promtool.js"
import { awaitBroadcast } from "../support/settlements.js"
import { devnetRpc, TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"
import { type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!).address
const PAYMENTS = 10
const RELAYER_REVERTED = `relayer_transactions_reverted_total{relayer="${RELAYER}"}`

const chainReader = Effect.map(TestDevnet, (devnet) => ({
  devnet,
  client: createPublicClient({ transport: http(devnet.rpcUrl) })
}))

/** The relayer's gas ether and how many transactions it has sent (pending ones included). */
const relayerState = Effect.flatMap(chainReader, ({ client }) =>
  Effect.promise(async () => ({
    ether: await client.getBalance({ address: RELAYER }),
    sent: await client.getTransactionCount({ address: RELAYER, blockTag: "pending" })
  }))
)

/** An open order of `amount` and what its pay path offers. */
const openOrder = (amount: string) =>
  Effect.gen(function* () {
    const created = yield* send("POST", "/merchant/orders", { json: { amount, description: "drain" } })
    expect(created.status).toBe(200)
    const offer = yield* send("GET", `/merchant/orders/${created.body.id}/pay`)
    expect(offer.status).toBe(402)
    return { id: created.body.id as string, offer: offer.body as Offer }
  })

/** The value of a counter in /metrics (0 when it has no sample yet). */
const metric = (name: string) =>
  send("GET", "/metrics").pipe(
    Effect.map((response) => {
      const line = String(response.body)
        .split("\n")
        .find((candidate) => candidate.startsWith(`${name} `))
      return line === undefined ? 0 : Number(line.split(" ")[1])
    })
  )

const logs = captureLogs()

/** The journal's status of a relayer transaction (the tracker's word on it). */
const journalStatus = (hash: string) =>
  Effect.flatMap(SqlClient.SqlClient, (sql) =>
    sql<{ readonly status: string }>`SELECT status FROM relayed_transactions WHERE tx_hash = ${hash}`.pipe(
      Effect.map((rows) => rows[0]?.status)
    )
  )

layer(testServer({ MERCHANT_PAY_TO: merchant.address }).pipe(Layer.provide(logs.layer)), {
  excludeTestServices: true
})("gas drain", (it) => {
  it.effect(
    "10 concurrent payments from a payer funded for one order: one broadcast, none reverted, 9×402, orders open",
    () =>
      Effect.gen(function* () {
        const { devnet, client } = yield* chainReader
        const payer = privateKeyToAccount(generatePrivateKey())
        const orders = yield* Effect.forEach(Array.from({ length: PAYMENTS }), () => openOrder("0.000001"))
        // One order's worth: the most any of them asks (each has its own value below a micro-dollar),
        // less than any two ask.
        const [oneOrder] = orders.map((order) => BigInt(order.offer.accepts[0]!.amount)).sort((a, b) => Number(b - a))
        yield* mintUsd1(devnet, payer.address, oneOrder!).pipe(Effect.orDie)
        const signed = yield* Effect.forEach(orders, (order) => Effect.promise(() => signPayment(payer, order.offer)))
        const before = yield* relayerState
        const revertedBefore = yield* metric("merchant_settlements_reverted_total")

        const answers = yield* Effect.forEach(
          orders,
          (order, i) =>
            send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "PAYMENT-SIGNATURE": signed[i]!.header } }),
          { concurrency: "unbounded" }
        )

        const paid = answers.filter((answer) => answer.status === 200)
        const refused = answers.filter((answer) => answer.status === 402)
        expect(answers.map((answer) => answer.status).sort()).toEqual([200, ...Array(PAYMENTS - 1).fill(402)])
        for (const answer of refused) {
          expect(["PAYMENT_INVALID", "SETTLEMENT_FAILED"]).toContain(answer.body.code)
          expect(answer.body.error).toMatch(/insufficient_balance/)
        }
        const statuses = yield* Effect.forEach(orders, (order) =>
          send("GET", `/merchant/orders/${order.id}`).pipe(Effect.map((response) => response.body.status))
        )
        expect(statuses.filter((status) => status === "paid")).toHaveLength(1)
        expect(statuses.filter((status) => status === "open")).toHaveLength(PAYMENTS - 1)

        // Exactly one transaction left the relayer, it succeeded, and it is all the gas it paid.
        const after = yield* relayerState
        expect(after.sent - before.sent).toBe(1)
        const receipt = yield* Effect.promise(() => client.getTransactionReceipt({ hash: paid[0]!.body.tx as Hex }))
        expect(receipt.status).toBe("success")
        expect(before.ether - after.ether).toBe(receipt.gasUsed * receipt.effectiveGasPrice)
        expect(yield* metric("merchant_settlements_reverted_total")).toBe(revertedBefore)
      })
  )

  it.effect(
    "a settlement the payer undercuts while it waits in the pool reverts: 402, counted, a warning names the payer",
    () =>
      Effect.gen(function* () {
        const { devnet } = yield* chainReader
        const payer = privateKeyToAccount(generatePrivateKey())
        const order = yield* openOrder("2")
        const amount = BigInt(order.offer.accepts[0]!.amount)
        yield* mintUsd1(devnet, payer.address, amount).pipe(Effect.orDie)
        yield* devnetRpc(devnet, "anvil_setBalance", [payer.address, `0x${parseEther("1").toString(16)}`])
        const { header } = yield* Effect.promise(() => signPayment(payer, order.offer))
        const revertedBefore = yield* metric("merchant_settlements_reverted_total")
        const relayerRevertedBefore = yield* metric(RELAYER_REVERTED)

        // Our settlement is simulated, signed and broadcast, and waits in the pool...
        yield* devnetRpc(devnet, "evm_setAutomine", [false])
        const paying = yield* Effect.fork(
          send("POST", `/merchant/orders/${order.id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })
        )
        yield* awaitBroadcast(order.id)
        // ...when the payer moves its USD1 away with a higher tip: both are mined, ours reverts.
        const wallet = createWalletClient({ account: payer, transport: http(devnet.rpcUrl) })
        yield* Effect.promise(() =>
          wallet.writeContract({
            chain: null,
            address: devnet.usd1,
            abi: erc20Abi,
            functionName: "transfer",
            args: [privateKeyToAccount(generatePrivateKey()).address, amount],
            gas: 100_000n,
            maxFeePerGas: parseUnits("100", 9),
            maxPriorityFeePerGas: parseUnits("50", 9)
          })
        )
        yield* devnetRpc(devnet, "evm_mine")
        yield* devnetRpc(devnet, "evm_setAutomine", [true])

        const answer = yield* Fiber.join(paying)
        expect(answer.status).toBe(402)
        expect(answer.body.code).toBe("SETTLEMENT_FAILED")
        expect((yield* send("GET", `/merchant/orders/${order.id}`)).body.status).toBe("open")
        expect(yield* metric("merchant_settlements_reverted_total")).toBe(revertedBefore + 1)
        expect(logs.said("WARN", "settlement reverted on chain")).toEqual([
          {
            level: "WARN",
            message: "settlement reverted on chain: the relayer paid its gas for nothing",
            annotations: expect.objectContaining({ "order.id": order.id, "payment.payer": payer.address })
          }
        ])
        // The relayer's own line and count for the transaction: once, though its receipt is read again.
        const sql = yield* SqlClient.SqlClient
        const [tx] = yield* sql<{
          readonly txHash: string
        }>`SELECT tx_hash FROM settlements WHERE order_id = ${order.id}`
        yield* eventually(
          "the tracker to check the transaction",
          journalStatus(tx!.txHash),
          (status) => status === "final"
        )
        expect(yield* metric(RELAYER_REVERTED)).toBe(relayerRevertedBefore + 1)
        if (!withoutPromtool) {
          expect(promtoolProblems(String((yield* send("GET", "/metrics")).body))).toBe("")
        }
        expect(logs.said("WARN", "relayer transaction reverted on chain")).toEqual([
          expect.objectContaining({ annotations: expect.objectContaining({ "tx.hash": tx!.txHash }) })
        ])
      })
  )
})
