/**
 * x402 payment throughput of the service against a baseline: the bare chain round trip of the
 * same EIP-3009 transfer (sign, send from a relayer, wait for the receipt) on the same devnet.
 * The ratio is what our verification, database reservation and HTTP add.
 *
 *   npx tsx bench/payments.ts [payments=100]
 *
 * Starts its own devnet, embedded PostgreSQL and service process; prints a table.
 */
import { spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { Effect, Redacted } from "effect"
import { createPublicClient, createWalletClient, type Hex, http, parseSignature } from "viem"
import { privateKeyToAccount } from "viem/accounts"
import { Usd1Artifact } from "../src/chain/contracts/artifacts.js"
import { ANVIL_ACCOUNT_KEYS, startDevnet } from "../src/chain/Devnet.js"
import { transferWithAuthorizationTypedData } from "../src/chain/Eip3009.js"
import { freePort, startEmbeddedPostgres } from "../src/EmbeddedPostgres.js"
import { authorizationOf, encodeHeader, type PaymentRequirements } from "../src/merchant/X402.js"

const N = Number(process.argv[2] ?? 100)
const payer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[1]!)
const baselineRelayer = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[8]!)
const merchant = "0x000000000000000000000000000000000000dEaD"

const authorizationFor = (to: string, value: string) => ({
  from: payer.address,
  to,
  value,
  validAfter: "0",
  validBefore: String(Math.floor(Date.now() / 1000) + 300),
  nonce: `0x${randomBytes(32).toString("hex")}` as Hex
})

const time = async (label: string, run: () => Promise<void>) => {
  const started = performance.now()
  await run()
  const ms = performance.now() - started
  return { label, ms, perPayment: ms / N, perSecond: (N * 1000) / ms }
}

const program = Effect.gen(function* () {
  const devnet = yield* startDevnet()
  const dir = mkdtempSync(path.join(tmpdir(), "card-service-bench-"))
  chmodSync(dir, 0o755)
  yield* Effect.addFinalizer(() => Effect.sync(() => rmSync(dir, { recursive: true, force: true })))
  const databaseUrl = yield* startEmbeddedPostgres({ dir: path.join(dir, "pg"), database: "bench", unsafeFast: true })
  const port = yield* freePort
  const child = spawn(process.execPath, ["--import", "tsx", "src/main.ts"], {
    env: {
      PATH: process.env.PATH ?? "",
      PORT: String(port),
      DATA_DIR: dir,
      DATABASE_URL: Redacted.value(databaseUrl),
      CHAIN_RPC_URL: devnet.rpcUrl,
      CHAIN_ID: String(devnet.chainId),
      USD1_ADDRESS: devnet.usd1,
      RELAYER_PRIVATE_KEY: ANVIL_ACCOUNT_KEYS[9]!,
      MERCHANT_PAY_TO: merchant,
      RATE_LIMIT_ORDERS: "1000000",
      LOG_LEVEL: "Warn"
    },
    stdio: "ignore"
  })
  yield* Effect.addFinalizer(() => Effect.sync(() => child.kill("SIGTERM")))
  const base = `http://127.0.0.1:${port}`
  yield* Effect.promise(async () => {
    for (let i = 0; i < 600; i++) {
      if (
        await fetch(`${base}/health`).then(
          (r) => r.ok,
          () => false
        )
      )
        return
      await new Promise((resolve) => setTimeout(resolve, 100))
    }
    throw new Error("service did not start")
  })

  const reader = createPublicClient({ transport: http(devnet.rpcUrl), pollingInterval: 20 })
  const wallet = createWalletClient({ account: baselineRelayer, transport: http(devnet.rpcUrl, { retryCount: 0 }) })
  const domain = {
    chainId: devnet.chainId,
    usd1: { address: devnet.usd1, decimals: 18, name: "World Liberty Financial USD", version: "1" }
  }

  const baseline = async () => {
    const authorization = authorizationFor(merchant, "1000000000000000000")
    const signature = await payer.signTypedData(
      transferWithAuthorizationTypedData(authorizationOf(authorization), domain)
    )
    const { v, r, s } = parseSignature(signature)
    const hash = await wallet.writeContract({
      chain: null,
      address: devnet.usd1,
      abi: Usd1Artifact.abi,
      functionName: "transferWithAuthorization",
      args: [
        payer.address,
        merchant,
        BigInt(authorization.value),
        0n,
        BigInt(authorization.validBefore),
        authorization.nonce,
        Number(v),
        r,
        s
      ]
    })
    await reader.waitForTransactionReceipt({ hash })
  }

  const payOrder = async () => {
    const order = await fetch(`${base}/merchant/orders`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ amount: "1", description: "bench" })
    }).then((r) => r.json() as Promise<{ id: string }>)
    const offer = await fetch(`${base}/merchant/orders/${order.id}/pay`)
    const requirements = ((await offer.json()) as { accepts: Array<PaymentRequirements> }).accepts[0]!
    const authorization = authorizationFor(requirements.payTo, requirements.amount)
    const signature = await payer.signTypedData(
      transferWithAuthorizationTypedData(authorizationOf(authorization), domain)
    )
    const paid = await fetch(`${base}/merchant/orders/${order.id}/pay`, {
      method: "POST",
      headers: {
        "payment-signature": encodeHeader({
          x402Version: 2,
          accepted: requirements,
          payload: { signature, authorization }
        })
      }
    })
    if (paid.status !== 200) throw new Error(`payment failed: ${paid.status} ${await paid.text()}`)
  }

  const sequentially = (f: () => Promise<void>) => async () => {
    for (let i = 0; i < N; i++) await f()
  }
  const concurrently = (f: () => Promise<void>) => async () => {
    await Promise.all(Array.from({ length: N }, f))
  }

  yield* Effect.promise(() => payOrder().then(baseline)) // warm both paths
  const rows = [
    yield* Effect.promise(() => time("baseline: bare EIP-3009 transfer, sequential", sequentially(baseline))),
    yield* Effect.promise(() => time("service: order + 402 + x402 pay, sequential", sequentially(payOrder))),
    yield* Effect.promise(() => time("service: order + 402 + x402 pay, concurrent", concurrently(payOrder)))
  ]
  const reference = rows[0]!.perPayment
  console.log(`\n${N} payments each (devnet, 2-core machine)\n`)
  console.log("| run | ms / payment | payments / s | ratio to baseline |")
  console.log("|---|---|---|---|")
  for (const row of rows) {
    console.log(
      `| ${row.label} | ${row.perPayment.toFixed(2)} | ${row.perSecond.toFixed(1)} | ${(row.perPayment / reference).toFixed(2)}x |`
    )
  }
})

Effect.runPromise(Effect.scoped(program)).then(
  () => process.exit(0),
  (error) => {
    console.error(error)
    process.exit(1)
  }
)
