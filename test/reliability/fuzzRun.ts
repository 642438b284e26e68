/**
 * The fuzz run against a live server: fixtures (orders, a signed-in user, payment headers shaped
 * like real ones), every operation's generated requests, requests off the schema, and the raw
 * byte-level cases; then the tally.
 */
import { Agent } from "node:http"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { encodeHeader } from "../../src/merchant/X402.js"
import { signIn } from "../support/auth.js"
import { send } from "../support/http.js"
import { rawRequest } from "../support/rawHttp.js"
import { type Offer, signPayment } from "../support/x402.js"
import {
  conformingErrorBody,
  type FuzzRequest,
  type Outcome,
  operationsOf,
  pool,
  requestFor,
  requestsOffTheSchema,
  type Spec,
  sendRaw
} from "./fuzz.js"
import { rawCases } from "./rawCases.js"
import { seeded } from "./values.js"

/**
 * No answer within this is a hang: far beyond every bound of the service (the longest, SETTLEMENT_WAIT,
 * is 8 s), so that a loaded machine slows the fuzzer down rather than failing it.
 */
export const HANG_LIMIT_MS = 60_000
const CONCURRENCY = 12

export interface FuzzTally {
  readonly requests: number
  readonly operations: number
  readonly serverErrors: ReadonlyArray<Outcome>
  readonly nonConforming: ReadonlyArray<Outcome>
  readonly hangs: ReadonlyArray<Outcome>
  readonly unanswered: ReadonlyArray<Outcome>
  readonly byStatus: ReadonlyMap<number, number>
}

/** Orders, a bearer token and payment headers (valid, unfunded, and subtly broken ones). */
const fixtures = Effect.gen(function* () {
  const chain = yield* InMemoryChain
  const orders: Array<{ id: string; offer: Offer }> = []
  for (const amount of ["1", "2.5", "0.000001", "1000000", "42"]) {
    const created = yield* send("POST", "/merchant/orders", { json: { amount, description: `fuzz ${amount}` } })
    const offer = yield* send("GET", `/merchant/orders/${created.body.id}/pay`)
    orders.push({ id: created.body.id, offer: offer.body })
  }
  const { token } = yield* signIn()
  const payer = privateKeyToAccount(generatePrivateKey())
  yield* chain.mint(chain.usd1.address, payer.address, parseUnits("10000000", 18))
  const pauper = privateKeyToAccount(generatePrivateKey())
  const paymentHeaders = yield* Effect.promise(() =>
    Promise.all(
      orders.flatMap(({ offer }) => [
        signPayment(payer, offer).then((signed) => signed.header),
        signPayment(pauper, offer).then((signed) => signed.header),
        signPayment(payer, offer, { validBefore: (2n ** 200n).toString() }).then((signed) => signed.header),
        signPayment(payer, offer, { value: "1" }).then((signed) => signed.header),
        signPayment(payer, offer, { resource: null }).then((signed) => signed.header),
        signPayment(payer, offer).then((signed) =>
          encodeHeader({
            ...signed.payload,
            extensions: { note: "\u0000", deep: JSON.parse("[".repeat(60) + "]".repeat(60)) }
          })
        ),
        signPayment(payer, offer).then((signed) =>
          encodeHeader({
            ...signed.payload,
            payload: {
              ...signed.payload.payload,
              authorization: { ...signed.payload.payload.authorization, value: "9".repeat(78) }
            }
          })
        )
      ])
    )
  )
  return {
    pathValues: {
      id: [...orders.map((order) => order.id), "AAAAAAAAAAAAAAAAAAAAAA"],
      token: ["NVDA", "TSLA", "nvda", chain.usd1.address, "0x0000000000000000000000000000000000000000"],
      provider: ["sandbox", "didit", "scripted"],
      sessionId: ["AAAAAAAAAAAAAAAAAAAAAA"]
    },
    bearer: token,
    paymentHeaders: [...paymentHeaders, "%%%", Buffer.from("{}").toString("base64"), "A".repeat(30_000)]
  }
})

/** Fuzzes the server at `port` with at least `total` requests; answers the tally. */
export const fuzz = (port: number, total: number, seed: number) =>
  Effect.gen(function* () {
    const spec = (yield* send("GET", "/openapi.json")).body as Spec
    const operations = operationsOf(spec)
    const given = yield* fixtures
    const rng = seeded(seed)
    const perOperation = Math.ceil(total / operations.length)
    const requests: Array<FuzzRequest> = [
      ...operations.flatMap((operation) =>
        Array.from({ length: perOperation }, () => requestFor(spec, operation, given, rng))
      ),
      ...requestsOffTheSchema(operations, rng)
    ]
    // Shuffled, so that slow and fast operations interleave.
    for (let i = requests.length - 1; i > 0; i--) {
      const j = Math.floor(rng() * (i + 1))
      ;[requests[i], requests[j]] = [requests[j]!, requests[i]!]
    }
    const agent = new Agent({ keepAlive: true, maxSockets: CONCURRENCY })
    const outcomes = yield* Effect.promise(() =>
      pool(
        requests.map((request) => () => sendRaw(port, agent, request, HANG_LIMIT_MS)),
        CONCURRENCY
      )
    ).pipe(Effect.ensuring(Effect.sync(() => agent.destroy())))
    const raw = yield* Effect.forEach(
      rawCases,
      (rawCase) =>
        rawRequest(port, rawCase.parts, HANG_LIMIT_MS).pipe(
          Effect.map(
            (response): Outcome => ({
              request: `raw: ${rawCase.name}`,
              status: response.status,
              body: response.body,
              // No answer at all within the limit, on a connection the server kept open.
              hung: response.status === undefined && !response.closed
            })
          )
        ),
      { concurrency: "unbounded" }
    )
    const all = [...outcomes, ...raw]
    const byStatus = new Map<number, number>()
    for (const outcome of all) {
      if (outcome.status !== undefined) byStatus.set(outcome.status, (byStatus.get(outcome.status) ?? 0) + 1)
    }
    const isHead = (outcome: Outcome) => outcome.request.startsWith("HEAD ")
    return {
      requests: all.length,
      operations: operations.length,
      serverErrors: all.filter((outcome) => (outcome.status ?? 0) >= 500),
      nonConforming: all.filter(
        (outcome) =>
          outcome.status !== undefined &&
          outcome.status >= 400 &&
          !isHead(outcome) &&
          !conformingErrorBody(outcome.body)
      ),
      hangs: all.filter((outcome) => outcome.hung),
      unanswered: all.filter((outcome) => outcome.status === undefined && !outcome.hung),
      byStatus
    } satisfies FuzzTally
  })

/** A few failures of a kind, for the test's message. */
export const samples = (outcomes: ReadonlyArray<Outcome>) =>
  outcomes
    .slice(0, 8)
    .map((outcome) => `${outcome.request} -> ${outcome.status ?? "no answer"} ${outcome.body.slice(0, 160)}`)
    .join("\n")
