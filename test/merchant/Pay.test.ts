import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { describe, expect, layer } from "@effect/vitest"
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch"
import { Effect, Fiber, Layer } from "effect"
import {
  createPublicClient,
  createWalletClient,
  erc20Abi,
  getAddress,
  type Hex,
  http,
  parseAbiItem,
  parseSignature,
  parseUnits
} from "viem"
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts"
import { Usd1Artifact } from "../../src/chain/contracts/artifacts.js"
import { ANVIL_ACCOUNT_KEYS } from "../../src/chain/Devnet.js"
import {
  counterfactualSignature,
  createSmartAccount,
  mintUsd1,
  smartAccountAddress
} from "../../src/chain/DevnetOperator.js"
import { CLOCK_SKEW_SECONDS, encodeHeader, type PaymentPayload, Reason } from "../../src/merchant/X402.js"
import { send } from "../support/http.js"
import { captureLogs } from "../support/logs.js"
import { metricValue } from "../support/metrics.js"
import { awaitBroadcast } from "../support/settlements.js"
import { TestDevnet } from "../support/TestChain.js"
import { testServer } from "../support/TestServer.js"
import { decodeHeader, expectWorth, type Offer, signPayment } from "../support/x402.js"

const merchant = privateKeyToAccount(generatePrivateKey())
const RELAYER = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[9]!)

const chainReader = Effect.map(TestDevnet, (devnet) => ({
  devnet,
  client: createPublicClient({ transport: http(devnet.rpcUrl) })
}))

const usd1Balance = (owner: Hex) =>
  Effect.flatMap(chainReader, ({ devnet, client }) =>
    Effect.promise(() =>
      client.readContract({ address: devnet.usd1, abi: erc20Abi, functionName: "balanceOf", args: [owner] })
    )
  )

/** Transactions the relayer has sent: unchanged means nothing was broadcast. */
const relayerSent = Effect.flatMap(chainReader, ({ client }) =>
  Effect.promise(() => client.getTransactionCount({ address: RELAYER.address, blockTag: "pending" }))
)

const transfersTo = (to: Hex) =>
  Effect.flatMap(chainReader, ({ devnet, client }) =>
    Effect.promise(() =>
      client.getLogs({
        address: devnet.usd1,
        event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
        args: { to },
        fromBlock: 0n
      })
    )
  ).pipe(Effect.map((logs) => logs.length))

const createOrder = (amount: string, description = "Flat white") =>
  send("POST", "/merchant/orders", { json: { amount, description } }).pipe(
    Effect.tap((response) => expect(response.status).toBe(200)),
    Effect.map((response) => response.body)
  )

const offerOf = (id: string) =>
  send("GET", `/merchant/orders/${id}/pay`).pipe(
    Effect.tap((response) => expect(response.status).toBe(402)),
    Effect.map((response) => response.body as Offer)
  )

/** What paying the offer transfers: the order's amount and its own value below a micro-dollar. */
const asked = (offer: Offer) => BigInt(offer.accepts[0]!.amount)

const payWith = (id: string, header: string, method: "GET" | "POST" = "POST") =>
  send(method, `/merchant/orders/${id}/pay`, { headers: { "PAYMENT-SIGNATURE": header } })

const baseUrl = Effect.map(HttpServer.HttpServer, (server) =>
  server.address._tag === "TcpAddress" ? `http://127.0.0.1:${server.address.port}` : ""
)

const logs = captureLogs()

layer(testServer({ MERCHANT_PAY_TO: merchant.address }).pipe(Layer.provide(logs.layer)), {
  excludeTestServices: true
})("x402 merchant", (it) => {
  it.effect("a standard x402 v2 client pays an order end to end, balances move once", () =>
    Effect.gen(function* () {
      const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[1]!)
      const { devnet } = yield* chainReader
      const order = yield* createOrder("12.50")
      expect(order).toMatchObject({ amount: "12.50", amountUsd: "12.5", status: "open", description: "Flat white" })
      expect(order.payer).toBeUndefined()
      expect(order.tx).toBeUndefined()
      expect(order.id).toMatch(/^[A-Za-z0-9_-]{22}$/)
      const payerBefore = yield* usd1Balance(payer.address)
      const merchantBefore = yield* usd1Balance(merchant.address)
      const amount = asked(yield* offerOf(order.id))
      expectWorth(amount, "12.5")

      const client = new x402Client()
      registerExactEvmScheme(client, { signer: payer })
      client.setSpendControls({
        allowedAssets: [
          { network: "eip155:31337", asset: devnet.usd1, maxAmountPerPayment: parseUnits("100", 18).toString() }
        ]
      })
      const payFetch = wrapFetchWithPayment(fetch, client)
      const url = `${yield* baseUrl}/merchant/orders/${order.id}/pay`
      const response = yield* Effect.promise(() => payFetch(url))
      expect(response.status).toBe(200)
      const paid = (yield* Effect.promise(() => response.json())) as { tx: string }
      expect(paid).toMatchObject({ id: order.id, status: "paid", payer: payer.address })
      expect(paid.tx).toMatch(/^0x[0-9a-f]{64}$/)
      const receipt = decodePaymentResponseHeader(response.headers.get("PAYMENT-RESPONSE")!)
      expect(receipt).toMatchObject({
        success: true,
        transaction: paid.tx,
        network: "eip155:31337",
        payer: payer.address
      })

      expect(yield* usd1Balance(payer.address)).toBe(payerBefore - amount)
      expect(yield* usd1Balance(merchant.address)).toBe(merchantBefore + amount)
      expect((yield* send("GET", `/merchant/orders/${order.id}`)).body).toMatchObject({
        status: "paid",
        payer: payer.address,
        tx: paid.tx
      })
      // A paid order answers GET on the pay path with the order.
      const again = yield* send("GET", `/merchant/orders/${order.id}/pay`)
      expect(again.status).toBe(200)
      expect(again.body.status).toBe("paid")
    })
  )

  it.effect("a smart account pays: ERC-1271 once deployed, a clear refusal before; wrong signatures refused", () =>
    Effect.gen(function* () {
      const { devnet } = yield* chainReader
      const owner = privateKeyToAccount(generatePrivateKey())
      const account = { owner: owner.address, salt: 7n }
      const wallet = yield* smartAccountAddress(devnet, account).pipe(Effect.orDie)
      yield* mintUsd1(devnet, wallet, parseUnits("10", 18)).pipe(Effect.orDie)
      const asWallet = { ...owner, address: wallet } as PrivateKeyAccount
      /** A payment from the wallet signed by `signer`, its signature optionally wrapped (ERC-6492). */
      const payment = (offer: Offer, signer: PrivateKeyAccount, wrapped: boolean) =>
        Effect.promise(() => signPayment(asWallet, offer, { signer })).pipe(
          Effect.map(({ payload }) =>
            encodeHeader({
              ...payload,
              payload: {
                ...payload.payload,
                signature: wrapped
                  ? counterfactualSignature(devnet, account, payload.payload.signature as Hex)
                  : payload.payload.signature
              }
            })
          )
        )
      const refusedWith = (id: string, header: string, reason: string) =>
        Effect.gen(function* () {
          const sent = yield* relayerSent
          const refused = yield* payWith(id, header)
          expect(refused.status).toBe(402)
          expect(refused.body).toMatchObject({ error: reason, code: "PAYMENT_INVALID" })
          expect(decodeHeader(refused.headers["payment-required"])).toMatchObject({ error: reason })
          expect(yield* relayerSent).toBe(sent)
          expect((yield* send("GET", `/merchant/orders/${id}`)).body.status).toBe("open")
        })

      // Not deployed: the token has no account to ask. A right ERC-6492 signature is told so; a
      // wrong one, or the owner's bare signature, is a wrong signature.
      const early = yield* createOrder("4")
      const earlyOffer = yield* offerOf(early.id)
      yield* refusedWith(
        early.id,
        yield* payment(earlyOffer, owner, true),
        "invalid_exact_evm_payload_undeployed_smart_wallet"
      )
      const stranger = privateKeyToAccount(generatePrivateKey())
      yield* refusedWith(early.id, yield* payment(earlyOffer, stranger, true), "invalid_exact_evm_signature")
      yield* refusedWith(early.id, yield* payment(earlyOffer, owner, false), "invalid_exact_evm_signature")

      // Deployed: the token asks the account (ERC-1271), whether the client still wraps or not.
      yield* createSmartAccount(devnet, account).pipe(Effect.orDie)
      yield* refusedWith(early.id, yield* payment(earlyOffer, stranger, false), "invalid_exact_evm_signature")
      yield* refusedWith(early.id, yield* payment(earlyOffer, stranger, true), "invalid_exact_evm_signature")
      const merchantBefore = yield* usd1Balance(merchant.address)
      const paid = yield* payWith(early.id, yield* payment(earlyOffer, owner, false))
      expect(paid.status).toBe(200)
      expect(paid.body).toMatchObject({ status: "paid", payer: getAddress(wallet) })
      const later = yield* createOrder("2.5")
      const laterOffer = yield* offerOf(later.id)
      const wrappedPaid = yield* payWith(later.id, yield* payment(laterOffer, owner, true))
      expect(wrappedPaid.status).toBe(200)
      expect(decodeHeader(wrappedPaid.headers["payment-response"])).toMatchObject({
        success: true,
        payer: getAddress(wallet)
      })
      const spent = asked(earlyOffer) + asked(laterOffer)
      expect(yield* usd1Balance(wallet)).toBe(parseUnits("10", 18) - spent)
      expect(yield* usd1Balance(merchant.address)).toBe(merchantBefore + spent)
    })
  )

  it.effect("an authorization used first by someone else's transaction still pays the order once", () =>
    Effect.gen(function* () {
      const { devnet, client } = yield* chainReader
      const rpc = (method: string, params: ReadonlyArray<unknown> = []) =>
        Effect.promise(() => client.request({ method, params } as never))
      const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[6]!)
      const order = yield* createOrder("3.3")
      const offer = yield* offerOf(order.id)
      const { header, payload } = yield* Effect.promise(() => signPayment(payer, offer))
      const merchantBefore = yield* usd1Balance(merchant.address)
      const relayerReverted = metricValue(`relayer_transactions_reverted_total{relayer="${RELAYER.address}"}`)
      const settlementsReverted = metricValue("merchant_settlements_reverted_total")
      const [relayerRevertedBefore, settlementsRevertedBefore] = [yield* relayerReverted, yield* settlementsReverted]

      // Our settlement waits in the pool; a watcher submits the same authorization with a higher tip.
      yield* rpc("evm_setAutomine", [false])
      const paying = yield* Effect.fork(payWith(order.id, header))
      yield* awaitBroadcast(order.id)
      const a = payload.payload.authorization
      const { v, r, s } = parseSignature(payload.payload.signature as Hex)
      const watcher = createWalletClient({
        account: privateKeyToAccount(ANVIL_ACCOUNT_KEYS[7]!),
        transport: http(devnet.rpcUrl)
      })
      const frontRun = yield* Effect.promise(() =>
        watcher.writeContract({
          chain: null,
          address: devnet.usd1,
          abi: Usd1Artifact.abi,
          functionName: "transferWithAuthorization",
          args: [
            a.from as Hex,
            a.to as Hex,
            BigInt(a.value),
            0n,
            BigInt(a.validBefore),
            a.nonce as Hex,
            Number(v),
            r,
            s
          ],
          gas: 200_000n,
          maxFeePerGas: parseUnits("100", 9),
          maxPriorityFeePerGas: parseUnits("50", 9)
        })
      )
      yield* rpc("evm_mine")
      yield* rpc("evm_setAutomine", [true])

      const paid = yield* Fiber.join(paying)
      expect(paid.status).toBe(200)
      expect(paid.body).toMatchObject({ status: "paid", tx: frontRun, payer: payer.address })
      expect(yield* usd1Balance(merchant.address)).toBe(merchantBefore + asked(offer))
      // Ours was mined after it and reverted: the order is paid, yet the relayer's gas for nothing
      // is one WARN and one count (before, nothing said it: the settlement itself did not revert).
      const sql = yield* SqlClient.SqlClient
      const [ours] = yield* sql<{ readonly txHash: Hex }>`
        SELECT t.tx_hash FROM relayed_transactions t JOIN settlements s ON s.id = t.settlement_id
        WHERE s.order_id = ${order.id}`
      expect((yield* Effect.promise(() => client.getTransactionReceipt({ hash: ours!.txHash }))).status).toBe(
        "reverted"
      )
      expect(yield* relayerReverted).toBe(relayerRevertedBefore + 1)
      expect(yield* settlementsReverted).toBe(settlementsRevertedBefore)
      expect(
        logs
          .said("WARN", "relayer transaction reverted on chain")
          .filter((line) => line.annotations["tx.hash"] === ours!.txHash)
      ).toEqual([
        expect.objectContaining({ annotations: expect.objectContaining({ "chain.relayer": RELAYER.address }) })
      ])
    })
  )

  it.effect(
    "a payment made for order A pays no order B of the same amount, whatever its unsigned parts say, and still pays A",
    () =>
      Effect.gen(function* () {
        const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[5]!)
        const [a, b] = [yield* createOrder("2.25"), yield* createOrder("2.25")]
        const [offerA, offerB] = [yield* offerOf(a.id), yield* offerOf(b.id)]
        // Each order asks for its own value, which the signature covers.
        expectWorth(asked(offerA), "2.25")
        expectWorth(asked(offerB), "2.25")
        expect(asked(offerA)).not.toBe(asked(offerB))
        // A standard client echoes the resource of the 402 it answers.
        const { payload } = yield* Effect.promise(() => signPayment(payer, offerA))
        expect(payload.resource).toEqual(offerA.resource)
        const { resource: _, ...withoutResource } = payload
        const sentBefore = yield* relayerSent

        // What whoever holds A's unspent payment can make of it for B: none pays B.
        const rewritten: ReadonlyArray<readonly [string, PaymentPayload, string]> = [
          ["as signed", payload, Reason.resourceMismatch],
          ["resource: B's", { ...payload, resource: offerB.resource }, "No matching payment requirements"],
          [
            "resource and accepted: B's",
            { ...payload, resource: offerB.resource, accepted: offerB.accepts[0]! },
            Reason.valueMismatch
          ],
          ["no resource", { ...withoutResource, accepted: offerB.accepts[0]! }, Reason.resourceMissing]
        ]
        for (const [what, tampered, reason] of rewritten) {
          const refused = yield* payWith(b.id, encodeHeader(tampered))
          expect(refused.status, what).toBe(402)
          expect(refused.body, what).toMatchObject({ code: "PAYMENT_INVALID", error: reason })
          expect(decodeHeader(refused.headers["payment-required"]).error, what).toBe(reason)
        }
        expect((yield* send("GET", `/merchant/orders/${b.id}`)).body.status).toBe("open")
        expect(yield* relayerSent).toBe(sentBefore)

        const paid = yield* payWith(a.id, encodeHeader(payload))
        expect(paid.status).toBe(200)
        expect(paid.body).toMatchObject({ id: a.id, status: "paid", payer: payer.address })
      })
  )

  it.effect("an unpaid order answers 402 with PAYMENT-REQUIRED on GET and POST", () =>
    Effect.gen(function* () {
      const { devnet } = yield* chainReader
      const order = yield* createOrder("3")
      const amounts = new Set<string>()
      for (const method of ["GET", "POST"] as const) {
        const response = yield* send(method, `/merchant/orders/${order.id}/pay`)
        expect(response.status).toBe(402)
        expect(response.headers["cache-control"]).toBe("no-store")
        const header = decodeHeader(response.headers["payment-required"])
        const { code, ...body } = response.body
        expect(code).toBe("PAYMENT_REQUIRED")
        expect(header).toEqual(body)
        expect(header).toMatchObject({
          x402Version: 2,
          error: "Payment required",
          resource: { url: `https://app.example.com/merchant/orders/${order.id}/pay`, description: "Flat white" },
          accepts: [
            {
              scheme: "exact",
              network: "eip155:31337",
              amount: expect.any(String),
              asset: devnet.usd1,
              payTo: merchant.address,
              maxTimeoutSeconds: 300,
              extra: { name: "World Liberty Financial USD", version: "1" }
            }
          ]
        })
        amounts.add(header.accepts[0].amount)
      }
      // Always the same: 3 USD1 and the order's own value below a micro-dollar.
      expect(amounts.size).toBe(1)
      expectWorth(BigInt([...amounts][0]!), "3")
    })
  )

  it.effect("invalid payments are 402 with the reference reason and nothing is broadcast", () =>
    Effect.gen(function* () {
      const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[2]!)
      const order = yield* createOrder("5")
      const offer = yield* offerOf(order.id)
      const now = Math.floor(Date.now() / 1000)
      const pauper = privateKeyToAccount(generatePrivateKey())
      /** Later than the offer's 300 s plus the clock skew allowed, by two minutes. */
      const pastTheBound = now + offer.accepts[0]!.maxTimeoutSeconds + CLOCK_SKEW_SECONDS + 120
      const cases: ReadonlyArray<[string, Promise<{ header: string }> | { header: string }, string]> = [
        ["no resource", signPayment(payer, offer, { resource: null }), Reason.resourceMissing],
        [
          "another resource",
          signPayment(payer, offer, { resource: { url: `${offer.resource.url}/../../other/pay` } }),
          Reason.resourceMismatch
        ],
        [
          "tampered amount",
          signPayment(payer, offer, { accepted: { amount: "1" }, value: "1" }),
          "No matching payment requirements"
        ],
        [
          "value below the amount",
          signPayment(payer, offer, { value: "1" }),
          "invalid_exact_evm_payload_authorization_value_mismatch"
        ],
        ["wrong payTo", signPayment(payer, offer, { to: pauper.address }), "invalid_exact_evm_recipient_mismatch"],
        [
          "expired validBefore",
          signPayment(payer, offer, { validBefore: String(now - 1) }),
          "invalid_exact_evm_payload_authorization_valid_before"
        ],
        [
          "validBefore past maxTimeoutSeconds and the clock skew",
          signPayment(payer, offer, { validBefore: String(pastTheBound) }),
          Reason.validBeforeTooLate
        ],
        [
          "validBefore ten years ahead",
          signPayment(payer, offer, { validBefore: String(now + 10 * 365 * 86_400) }),
          Reason.validBeforeTooLate
        ],
        [
          "not yet valid",
          signPayment(payer, offer, { validAfter: String(now + 600) }),
          "invalid_exact_evm_payload_authorization_valid_after"
        ],
        ["wrong signer", signPayment(payer, offer, { signer: pauper }), "invalid_exact_evm_signature"],
        ["insufficient balance", signPayment(pauper, offer), "invalid_exact_evm_insufficient_balance"],
        ["not base64", { header: "%%%not-base64%%%" }, "invalid_payload"],
        ["not JSON", { header: Buffer.from("{nope").toString("base64") }, "invalid_payload"],
        ["wrong shape", { header: Buffer.from('{"x402Version":1}').toString("base64") }, "invalid_payload"]
      ]
      const sentBefore = yield* relayerSent
      for (const [name, signing, reason] of cases) {
        const { header } = yield* Effect.promise(async () => signing)
        const response = yield* payWith(order.id, header)
        expect(response.status, name).toBe(402)
        expect(response.body.error, name).toBe(reason)
        expect(response.body.code, name).toBe("PAYMENT_INVALID")
        expect(decodeHeader(response.headers["payment-required"]).error, name).toBe(reason)
      }
      expect(yield* relayerSent).toBe(sentBefore)
      expect((yield* send("GET", `/merchant/orders/${order.id}`)).body.status).toBe("open")
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql`SELECT id FROM settlements WHERE order_id = ${order.id}`
      expect(rows).toHaveLength(0)
    })
  )

  it.effect("a reused authorization nonce is refused without a transaction", () =>
    Effect.gen(function* () {
      const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[3]!)
      const first = yield* createOrder("1")
      const second = yield* createOrder("1")
      const nonce = `0x${"ab".repeat(32)}` as Hex
      const firstOffer = yield* offerOf(first.id)
      const signedFirst = yield* Effect.promise(() => signPayment(payer, firstOffer, { nonce }))
      expect((yield* payWith(first.id, signedFirst.header)).status).toBe(200)
      const sentBefore = yield* relayerSent
      const secondOffer = yield* offerOf(second.id)
      const signedSecond = yield* Effect.promise(() => signPayment(payer, secondOffer, { nonce }))
      const reused = yield* payWith(second.id, signedSecond.header)
      expect(reused.status).toBe(402)
      expect(reused.body.error).toBe("invalid_exact_evm_nonce_already_used")
      expect(yield* relayerSent).toBe(sentBefore)
    })
  )

  it.effect("20 concurrent payments of one order settle exactly once", () =>
    Effect.gen(function* () {
      const payers = [4, 5, 6, 7].map((i) => privateKeyToAccount(ANVIL_ACCOUNT_KEYS[i]!))
      const order = yield* createOrder("7.25")
      const offer = yield* offerOf(order.id)
      const payments = yield* Effect.promise(() =>
        Promise.all(Array.from({ length: 20 }, (_, i) => signPayment(payers[i % payers.length]!, offer)))
      )
      const sentBefore = yield* relayerSent
      const merchantBefore = yield* usd1Balance(merchant.address)
      const transfersBefore = yield* transfersTo(merchant.address)
      const responses = yield* Effect.all(
        payments.map((p) => payWith(order.id, p.header)),
        { concurrency: "unbounded" }
      )
      const ok = responses.filter((r) => r.status === 200)
      expect(ok).toHaveLength(1)
      for (const refused of responses.filter((r) => r.status !== 200)) {
        expect(refused.status).toBe(409)
        expect(["PAYMENT_IN_PROGRESS", "ORDER_ALREADY_PAID"]).toContain(refused.body.code)
      }
      expect(yield* relayerSent).toBe(sentBefore + 1)
      expect(yield* transfersTo(merchant.address)).toBe(transfersBefore + 1)
      expect(yield* usd1Balance(merchant.address)).toBe(merchantBefore + asked(offer))
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ status: string }>`SELECT status FROM settlements WHERE order_id = ${order.id}`
      expect(rows.map((r) => r.status)).toEqual(["succeeded"])
    })
  )

  it.effect("12 orders paid at once settle each exactly once, on consecutive relayer nonces", () =>
    Effect.gen(function* () {
      const { devnet, client } = yield* chainReader
      const payers = Array.from({ length: 4 }, () => privateKeyToAccount(generatePrivateKey()))
      for (const payer of payers) yield* mintUsd1(devnet, payer.address, parseUnits("10", 18)).pipe(Effect.orDie)
      const orders = yield* Effect.forEach(Array.from({ length: 12 }), (_, i) => createOrder(`1.0${i}`))
      const offers = yield* Effect.forEach(orders, (order) => offerOf(order.id))
      const payments = yield* Effect.forEach(offers, (offer, i) =>
        Effect.promise(() => signPayment(payers[i % payers.length]!, offer))
      )
      const sentBefore = yield* relayerSent
      const merchantBefore = yield* usd1Balance(merchant.address)
      const transfersBefore = yield* transfersTo(merchant.address)

      const responses = yield* Effect.all(
        orders.map((order, i) => payWith(order.id, payments[i]!.header)),
        { concurrency: "unbounded" }
      )
      expect(responses.map((r) => r.status)).toEqual(orders.map(() => 200))
      const txs = responses.map((r) => r.body.tx as Hex)
      expect(new Set(txs).size).toBe(12)
      const total = offers.reduce((sum, offer) => sum + asked(offer), 0n)
      expect(yield* usd1Balance(merchant.address)).toBe(merchantBefore + total)
      expect(yield* transfersTo(merchant.address)).toBe(transfersBefore + 12)
      expect(yield* relayerSent).toBe(sentBefore + 12)
      const nonces = yield* Effect.forEach(txs, (hash) =>
        Effect.promise(() => client.getTransaction({ hash })).pipe(Effect.map((tx) => tx.nonce))
      )
      expect([...nonces].sort((a, b) => a - b)).toEqual(Array.from({ length: 12 }, (_, i) => sentBefore + i))
      const sql = yield* SqlClient.SqlClient
      const rows = yield* sql<{ status: string }>`
        SELECT status FROM settlements WHERE order_id IN ${sql.in(orders.map((order) => order.id))}`
      expect(rows.map((r) => r.status)).toEqual(orders.map(() => "succeeded"))
    })
  )

  it.effect("the same payment retried after success returns the same receipt; another is 409", () =>
    Effect.gen(function* () {
      const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[8]!)
      const order = yield* createOrder("2")
      const offer = yield* offerOf(order.id)
      const payment = yield* Effect.promise(() => signPayment(payer, offer))
      const first = yield* payWith(order.id, payment.header)
      expect(first.status).toBe(200)
      const sentBefore = yield* relayerSent
      const retry = yield* payWith(order.id, payment.header, "GET")
      expect(retry.status).toBe(200)
      expect(retry.body).toEqual(first.body)
      expect(decodeHeader(retry.headers["payment-response"])).toEqual(decodeHeader(first.headers["payment-response"]))
      const other = yield* payWith(order.id, (yield* Effect.promise(() => signPayment(payer, offer))).header)
      expect(other.status).toBe(409)
      expect(other.body.code).toBe("ORDER_ALREADY_PAID")
      expect(yield* relayerSent).toBe(sentBefore)
    })
  )

  it.effect("order input is validated and unknown orders are 404", () =>
    Effect.gen(function* () {
      for (const amount of ["0", "0.000000", "1.1234567", "1000000.01", "abc", "-1", "1e3", ""]) {
        const response = yield* send("POST", "/merchant/orders", { json: { amount, description: "x" } })
        expect(response.status, amount).toBe(400)
        expect(response.body.code).toBe("BAD_REQUEST")
        expect(response.body.error).toContain("amount")
      }
      for (const description of ["", "x".repeat(501)]) {
        const response = yield* send("POST", "/merchant/orders", { json: { amount: "1", description } })
        expect(response.status).toBe(400)
        expect(response.body.error).toContain("description")
      }
      expect((yield* createOrder("001.500000")).amountUsd).toBe("1.5")
      expect((yield* createOrder("1000000")).amountUsd).toBe("1000000")
      for (const path of ["/merchant/orders/nope", "/merchant/orders/nope/pay"]) {
        const response = yield* send("GET", path)
        expect(response.status).toBe(404)
        expect(response.body.code).toBe("ORDER_NOT_FOUND")
      }
    })
  )
})

describe("merchant configuration", () => {
  layer(testServer({ MERCHANT_PAY_TO: merchant.address, ORDER_TTL: "300 millis" }), { excludeTestServices: true })(
    "order expiry",
    (it) => {
      it.effect("an order unpaid after ORDER_TTL is expired and refuses payment", () =>
        Effect.gen(function* () {
          const order = yield* createOrder("1")
          yield* Effect.sleep("400 millis")
          expect((yield* send("GET", `/merchant/orders/${order.id}`)).body.status).toBe("expired")
          const response = yield* send("GET", `/merchant/orders/${order.id}/pay`)
          expect(response.status).toBe(409)
          expect(response.body.code).toBe("ORDER_EXPIRED")
        })
      )
    }
  )

  layer(testServer(), { excludeTestServices: true })("without MERCHANT_PAY_TO", (it) => {
    it.effect("merchant endpoints are 404 NOT_FOUND", () =>
      Effect.gen(function* () {
        for (const [method, path] of [
          ["POST", "/merchant/orders"],
          ["GET", "/merchant/orders/abc"],
          ["GET", "/merchant/orders/abc/pay"],
          ["POST", "/merchant/orders/abc/pay"]
        ] as const) {
          const response = yield* send(
            method,
            path,
            method === "POST" ? { json: { amount: "1", description: "x" } } : {}
          )
          expect(response.status).toBe(404)
          expect(response.body.code).toBe("NOT_FOUND")
        }
      })
    )
  })
})
