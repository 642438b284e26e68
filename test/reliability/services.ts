/**
 * The service as separate processes (as `npm start` runs it) over one database and one devnet,
 * with load, and an audit of what the clients were told against what the chain and the database
 * say afterwards.
 */
import { Effect } from "effect"
import { createPublicClient, type Hex, http, parseAbiItem } from "viem"
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts"
import { Usd1Artifact } from "../../src/chain/contracts/artifacts.js"
import { ANVIL_ACCOUNT_KEYS, type Devnet } from "../../src/chain/Devnet.js"
import { type Answer, callService, devnetServiceEnv, type ServiceProcess } from "../support/process.js"
import { queryDatabase as query } from "../support/TestDatabase.js"
import { eventually } from "../support/wait.js"
import { type Offer, signPayment } from "../support/x402.js"

/** Dev accounts 1-8 hold 10,000 USD1 each on a fresh devnet (9 is the relayer). */
export const payers: ReadonlyArray<PrivateKeyAccount> = [1, 2, 3, 4, 5, 6, 7, 8].map((i) =>
  privateKeyToAccount(ANVIL_ACCOUNT_KEYS[i]!)
)

/**
 * A replica's environment. Each replica needs its own relayer key (`relayer`: a dev account index;
 * 9 is the devnet's relayer, 0 its deployer), as in production: one key's nonces are ordered by
 * one process only.
 */
export const serviceEnv = (
  chain: { readonly rpcUrl: string; readonly devnet: Devnet },
  databaseUrl: string,
  merchant: Hex,
  relayer: 9 | 0 = 9
) =>
  devnetServiceEnv(
    chain.devnet,
    databaseUrl,
    {
      RELAYER_PRIVATE_KEY: ANVIL_ACCOUNT_KEYS[relayer]!,
      MERCHANT_PAY_TO: merchant,
      RATE_LIMIT_ORDERS: "1000000",
      LOG_LEVEL: "Error"
    },
    chain.rpcUrl
  )

export type { Answer }
export const call = callService

export interface Order {
  readonly id: string
  /** What its payment transfers, in atomic units (the order's own value: its requirements' amount). */
  readonly amount: bigint
  readonly offer: Offer
}

/** Orders with distinct amounts (1.001, 1.002, ...): a transfer's value names its order. */
export const createOrders = (service: ServiceProcess, count: number, offset = 0) =>
  Effect.forEach(
    Array.from({ length: count }, (_, i) => (1 + (offset + i + 1) / 1000).toFixed(3)),
    (amount) =>
      Effect.gen(function* () {
        const created = yield* call(service, "POST", "/merchant/orders", {
          json: { amount, description: "reliability" }
        })
        if (created.status !== 200) return yield* Effect.dieMessage(`order not created: ${created.status}`)
        const offer: Offer = (yield* call(service, "GET", `/merchant/orders/${created.body.id}/pay`)).body
        return { id: created.body.id as string, amount: BigInt(offer.accepts[0]!.amount), offer } satisfies Order
      }),
    { concurrency: 4 }
  )

export interface Attempt {
  readonly order: string
  readonly payer: Hex
  readonly nonce: Hex
  readonly answer: Answer
}

/** Signs one payment of `order` by `payer` and sends it. */
export const payOnce = (service: ServiceProcess, order: Order, payer: PrivateKeyAccount) =>
  Effect.gen(function* () {
    const signed = yield* Effect.promise(() => signPayment(payer, order.offer))
    const answer = yield* call(service, "POST", `/merchant/orders/${order.id}/pay`, {
      headers: { "payment-signature": signed.header }
    })
    return {
      order: order.id,
      payer: payer.address,
      nonce: signed.payload.payload.authorization.nonce as Hex,
      answer
    } satisfies Attempt
  })

/** Terminates every backend of the service's pool and migrations (not the test's own connections). */
export const killBackends = (databaseUrl: string) =>
  query(
    databaseUrl,
    `SELECT count(pg_terminate_backend(pid))::int AS killed FROM pg_stat_activity
     WHERE datname = current_database() AND application_name LIKE 'card-service%' AND pid <> pg_backend_pid()`
  ).pipe(Effect.map((rows) => rows[0]!.killed as number))

/** Waits until no settlement is pending or broadcast. */
export const awaitSettled = (databaseUrl: string) =>
  eventually(
    "every settlement to be final",
    query(databaseUrl, "SELECT count(*)::int AS n FROM settlements WHERE status IN ('pending', 'broadcast')"),
    (rows) => rows[0]!.n === 0,
    { every: "250 millis" }
  ).pipe(Effect.asVoid)

export interface Audit {
  readonly paidOrders: number
  readonly openOrders: number
  readonly transfers: number
  /** Orders with more than one transfer, or paid without exactly its transfer. */
  readonly inconsistent: ReadonlyArray<string>
  /** Attempts answered as failed whose authorization was used on chain. */
  readonly failedButPaid: ReadonlyArray<Attempt>
  /** Attempts answered 200 whose authorization was not used on chain. */
  readonly paidButNot: ReadonlyArray<Attempt>
}

/** What the clients were told, against the chain and the database, once everything settled. */
export const audit = (
  devnet: Devnet,
  databaseUrl: string,
  merchant: Hex,
  orders: ReadonlyArray<Order>,
  attempts: ReadonlyArray<Attempt>
) =>
  Effect.gen(function* () {
    const client = createPublicClient({ transport: http(devnet.rpcUrl) })
    const logs = yield* Effect.promise(() =>
      client.getLogs({
        address: devnet.usd1,
        event: parseAbiItem("event Transfer(address indexed from, address indexed to, uint256 value)"),
        args: { to: merchant },
        fromBlock: 0n
      })
    )
    const rows = yield* query(databaseUrl, "SELECT id, status, tx FROM orders WHERE id = ANY($1)", [
      orders.map((order) => order.id)
    ])
    const inconsistent = orders.flatMap((order) => {
      const row = rows.find((candidate) => candidate.id === order.id)
      const transfers = logs.filter((log) => log.args.value === order.amount)
      const paidRight = row?.status === "paid" && transfers.length === 1 && transfers[0]!.transactionHash === row.tx
      const openRight = (row?.status === "open" || row?.status === "expired") && transfers.length === 0
      return paidRight || openRight ? [] : [`${order.id}: ${row?.status} with ${transfers.length} transfer(s)`]
    })
    const used = yield* Effect.forEach(
      attempts,
      (attempt) =>
        Effect.promise(() =>
          client.readContract({
            address: devnet.usd1,
            abi: Usd1Artifact.abi,
            functionName: "authorizationState",
            args: [attempt.payer, attempt.nonce]
          })
        ).pipe(Effect.map((state) => [attempt, state] as const)),
      { concurrency: 8 }
    )
    // Any refusal (402, 409, 503) says this authorization was not and will not be used.
    const toldFailed = (attempt: Attempt) => attempt.answer.status !== undefined && attempt.answer.status >= 400
    return {
      paidOrders: rows.filter((row) => row.status === "paid").length,
      openOrders: rows.filter((row) => row.status === "open").length,
      transfers: logs.filter((log) => orders.some((order) => order.amount === log.args.value)).length,
      inconsistent,
      failedButPaid: used.filter(([attempt, state]) => state && toldFailed(attempt)).map(([attempt]) => attempt),
      paidButNot: used.filter(([attempt, state]) => !state && attempt.answer.status === 200).map(([attempt]) => attempt)
    } satisfies Audit
  })

/** Status counts, "200:12 503:3". */
export const statuses = (answers: ReadonlyArray<Answer>) => {
  const counts = new Map<string, number>()
  for (const answer of answers) {
    const key = answer.status === undefined ? "none" : String(answer.status)
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  return [...counts]
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([status, n]) => `${status}:${n}`)
    .join(" ")
}

/** Answers that break the error contract: a 500, no answer, or an error body without its code. */
export const contractBreaches = (answers: ReadonlyArray<Answer>) =>
  answers.filter(
    (answer) =>
      answer.status === undefined ||
      answer.status === 500 ||
      (answer.status >= 400 && (typeof answer.body?.error !== "string" || typeof answer.body?.code !== "string"))
  )
