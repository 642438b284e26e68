/**
 * `npm run demo`: the whole product, walked as a card app would, against the service started in this
 * process on embedded defaults (its own PostgreSQL and devnet in a temporary folder, the merchant on,
 * the agent live with a short interval). Prints numbered steps with their durations, ids and
 * transaction hashes; exits 0 when every step worked, non-zero naming the step that failed. The card
 * app learns that its identity check was approved and that the agent refilled the card from its
 * event stream (GET /me/events), as a card app is told, instead of polling. Once issued, the card
 * buys a coffee at the sandbox card network, as a shop's terminal swipes it: the hold is then on the
 * statement (a pending `card_payment`) and in GET /card/authorizations.
 *
 * The card key is the devnet's development account 1, which holds 10,000 USD1 on a fresh devnet.
 */
import { chmodSync, mkdtempSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { FetchHttpClient } from "@effect/platform"
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch"
import { ConfigProvider, Effect, Layer, Logger, LogLevel, Queue, Schedule, Stream } from "effect"
import { privateKeyToAccount } from "viem/accounts"
import { httpLive } from "../src/App.js"
import { eventStream, makeClient, type StreamEvent } from "../src/Client.js"
import { ANVIL_ACCOUNT_KEYS } from "../src/chain/Devnet.js"
import { freePort } from "../src/embedded/EmbeddedPostgres.js"
import { NodeServerLive } from "../src/http/Server.js"
import { PortsLive } from "../src/Ports.js"
import { AppConfig } from "../src/runtime/Config.js"
import { SqlLive } from "../src/storage/Database.js"

const STEPS = [
  "start the service",
  "sign in with the card key",
  "open the event stream",
  "identity check on the sandbox page",
  "card issued",
  "sign the card's spending allowance",
  "buy a coffee with the card",
  "set the agent's strategy",
  "portfolio",
  "pay an order with the card key (x402)",
  "statement shows the payment",
  "the card runs low; the agent refills it on chain",
  "statement shows the refill",
  "preview: Friday 15:40 ET",
  "preview: Saturday noon ET",
  "decision log"
] as const
type Step = (typeof STEPS)[number]

class StepFailed extends Error {}

type ReadyEvent = Extract<StreamEvent, { event: "ready" }>
type KycEvent = Extract<StreamEvent, { event: "kyc" }>
type DecisionEvent = Extract<StreamEvent, { event: "decision" }>
type RefillEvent = Extract<StreamEvent, { event: "refill" }>

/** The coffee shop the demo's card pays at, through the sandbox card network. */
const COFFEE_SHOP = { name: "Corner Coffee", mcc: "5814", country: "USA", city: "Oakland" } as const

const tty = process.stdout.isTTY === true
const line = (text: string) => process.stdout.write(`${text}\n`)

/** Runs one numbered step, printing its progress, duration and what it found. */
const step = <A, E, R>(name: Step, run: Effect.Effect<A, E, R>, show: (a: A) => string) =>
  Effect.gen(function* () {
    const n = STEPS.indexOf(name) + 1
    const label = `[${String(n).padStart(2)}/${STEPS.length}] ${name}`
    if (tty) process.stdout.write(`${label} …\r`)
    const started = performance.now()
    const result = yield* run.pipe(
      Effect.catchAllCause((cause) => Effect.fail(new StepFailed(`step ${n} "${name}" failed: ${cause}`)))
    )
    const ms = performance.now() - started
    line(`${label}  ${ms < 1000 ? `${ms.toFixed(0)} ms` : `${(ms / 1000).toFixed(1)} s`}  ${show(result)}`)
    return result
  })

const dataDir = mkdtempSync(path.join(tmpdir(), "card-service-demo-"))
// As root, the embedded PostgreSQL runs as the postgres user, which must be able to enter it.
chmodSync(dataDir, 0o755)

const demo = Effect.gen(function* () {
  const port = yield* freePort
  const baseUrl = `http://127.0.0.1:${port}`
  const card = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[1]!)
  const merchant = privateKeyToAccount(ANVIL_ACCOUNT_KEYS[2]!).address
  const env = {
    PORT: String(port),
    APP_URL: baseUrl,
    DATA_DIR: dataDir,
    MERCHANT_PAY_TO: merchant,
    AGENT_MODE: "live",
    AGENT_INTERVAL: "2 seconds",
    LOG_LEVEL: "Warn"
  }
  const service = httpLive(NodeServerLive).pipe(
    Layer.provide(PortsLive),
    Layer.provide(SqlLive),
    Layer.provide(AppConfig.layer),
    Layer.provide(Logger.minimumLogLevel(LogLevel.Warning)),
    Layer.provide(Layer.setConfigProvider(ConfigProvider.fromMap(new Map(Object.entries(env)))))
  )
  yield* step("start the service", Layer.build(service), () => baseUrl)

  const anonymous = yield* makeClient({ baseUrl })
  const signIn = yield* step(
    "sign in with the card key",
    Effect.gen(function* () {
      const { message } = yield* anonymous.auth.challenge({ payload: { address: card.address } })
      const signature = yield* Effect.promise(() => card.signMessage({ message }))
      return yield* anonymous.auth.verify({ payload: { message, signature } })
    }),
    (result) => `address ${result.address}, identity check ${result.kyc}`
  )
  const client = yield* makeClient({ baseUrl, token: signIn.token })

  // The card app's live events: the steps below wait on them instead of polling.
  const events = yield* Queue.unbounded<StreamEvent>()
  const awaitEvent = <E extends StreamEvent>(what: string, wanted: (event: StreamEvent) => event is E) =>
    Queue.take(events).pipe(
      Effect.repeat({ until: wanted }),
      Effect.map((event) => event as E),
      Effect.timeoutFail({ duration: "60 seconds", onTimeout: () => `no ${what} event within 60 seconds` })
    )
  yield* step(
    "open the event stream",
    Effect.gen(function* () {
      yield* eventStream({ baseUrl, token: signIn.token }).pipe(
        Stream.runForEach((event) => Queue.offer(events, event)),
        Effect.forkScoped
      )
      return yield* awaitEvent("ready", (event): event is ReadyEvent => event.event === "ready")
    }),
    (ready) => `GET /me/events: ready, identity check ${ready.data.kyc}, last event id ${ready.data.lastEventId}`
  )

  yield* step(
    "identity check on the sandbox page",
    Effect.gen(function* () {
      const { url } = yield* client.kyc.startSession({ payload: null })
      // The page's form, submitted as a browser does (urlencoded; the redirect to the app is not followed).
      const body = new URLSearchParams({
        fullName: "Ada Lovelace",
        documentNumber: "AL-1815-12-10",
        outcome: "approve"
      })
      const submitted = yield* Effect.promise(() => fetch(url, { method: "POST", body, redirect: "manual" }))
      if (submitted.status !== 303) {
        return yield* Effect.fail(
          `the sandbox form answered ${submitted.status}: ${yield* Effect.promise(() => submitted.text())}`
        )
      }
      return url
    }),
    (url) => `approved on ${url}`
  )

  const issued = yield* step(
    "card issued",
    awaitEvent("kyc approved", (event): event is KycEvent => event.event === "kyc" && event.data.kyc === "approved"),
    ({ data: { card }, id }) =>
      `kyc event #${id}: approved, holder ${card!.holder}, number •••• ${card!.number.slice(-4)}, expiry ${card!.expiry}`
  )

  // Card payments are paid under an allowance the holder signs once, without gas: an EIP-2612 permit
  // of USD1 for the card program's settlement account, submitted by it; active once read on chain.
  yield* step(
    "sign the card's spending allowance",
    Effect.gen(function* () {
      const { typedData } = yield* client.card.requestAllowance({ payload: { capUsd: 100, validDays: 30 } })
      const signature = yield* Effect.promise(() =>
        card.signTypedData(typedData as unknown as Parameters<typeof card.signTypedData>[0])
      )
      yield* client.card.submitAllowance({ payload: { signature } })
      return yield* client.card.allowance().pipe(
        Effect.filterOrFail(
          (allowance) => allowance.state === "active",
          (allowance) => `the allowance is ${allowance.state}`
        ),
        Effect.retry({ schedule: Schedule.spaced("250 millis"), times: 120 })
      )
    }),
    (allowance) =>
      `POST /card/allowance/request, signTypedData, POST /card/allowance: ${allowance.state}, cap $${allowance.capUsd.toFixed(2)}, ` +
      `spender ${allowance.spender}, permit ${allowance.tx ?? "?"}`
  )

  // The card key's wallet holds USD1 from the start (a fresh devnet's account 1). A merchant's
  // terminal swipes the card at the sandbox network, which checks the number, expiry and CVV and asks
  // this service through the production path; the hold is then on the statement and in the list.
  yield* step(
    "buy a coffee with the card",
    Effect.gen(function* () {
      const card = issued.data.card!
      let swipes = 0
      const swipe = Effect.suspend(() => {
        swipes += 1
        return anonymous.cardSandbox.authorize({
          payload: {
            cardNumber: card.number,
            expiry: card.expiry,
            cvv: card.cvv,
            amountUsd: "4.50",
            merchant: COFFEE_SHOP,
            channel: "in_person"
          }
        })
      })
      // A card issued a moment ago: until the balance follower has read its wallet (within a poll,
      // CARD_BALANCE_POLL), the issuer declines funds_unknown, and the terminal swipes again.
      const answer = yield* swipe.pipe(
        Effect.filterOrFail(
          (swiped) => swiped.reason !== "funds_unknown",
          () => "funds_unknown" as const
        ),
        Effect.retry({ schedule: Schedule.spaced("500 millis"), while: (error) => error === "funds_unknown" }),
        Effect.timeoutFail({ duration: "30 seconds", onTimeout: () => "the card's balance was not followed in 30 s" })
      )
      if (!answer.approved) return yield* Effect.fail(`the swipe was declined: ${answer.reason}`)
      const statement = yield* client.statement.activity({ urlParams: { limit: 50 } })
      const item = statement.find((entry) => entry.type === "card_payment" && entry.description === COFFEE_SHOP.name)
      if (item?.type !== "card_payment" || item.status !== "pending" || item.usd !== 4.5) {
        return yield* Effect.fail(`no pending $4.50 card_payment on the statement: ${JSON.stringify(statement)}`)
      }
      const authorizations = yield* client.authorizations.list({ urlParams: {} })
      const listed = authorizations.find((authorization) => authorization.id === answer.id)
      if (listed === undefined || !listed.approved || listed.heldUsd !== 4.5) {
        return yield* Effect.fail(`GET /card/authorizations does not list it: ${JSON.stringify(authorizations)}`)
      }
      return { item, listed, swipes }
    }),
    ({ item, listed, swipes }) =>
      `$4.50 at ${COFFEE_SHOP.name} (MCC ${COFFEE_SHOP.mcc}) approved, authorization ${listed.id}` +
      (swipes > 1 ? ` at swipe ${swipes} (funds_unknown before: the new card's balance was not read yet)` : "") +
      `; statement: ${item.type} $${item.usd.toFixed(2)} ${item.status}; GET /card/authorizations: ` +
      `held $${listed.heldUsd.toFixed(2)}, $${listed.availableUsd?.toFixed(2) ?? "?"} available after`
  )

  yield* step(
    "set the agent's strategy",
    client.strategy.put({ payload: { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 0 } }),
    (strategy) => `targets ${JSON.stringify(strategy.targets)}; the agent wallet is funded on the devnet`
  )

  const portfolio = yield* step(
    "portfolio",
    client.agent.portfolio(),
    (p) =>
      `wallet ${p.wallet}, worth $${p.totalUsd.toFixed(2)}: ` +
      p.holdings.map((h) => `${h.symbol} ${Number(h.balance).toFixed(4)}`).join(", ")
  )

  // The order takes the card down to $3, below the agent's $10 floor.
  const amount = (portfolio.card.usd1 - 3).toFixed(2)
  const paid = yield* step(
    "pay an order with the card key (x402)",
    Effect.gen(function* () {
      const order = yield* anonymous.merchant.createOrder({ payload: { amount, description: "Demo purchase" } })
      const x402 = new x402Client()
      registerExactEvmScheme(x402, { signer: card })
      x402.setSpendControls({ allowedAssets: true })
      const response = yield* Effect.promise(() =>
        wrapFetchWithPayment(fetch, x402)(`${baseUrl}/merchant/orders/${order.id}/pay`)
      )
      if (response.status !== 200) return yield* Effect.fail(`the paid request answered ${response.status}`)
      return { order, receipt: decodePaymentResponseHeader(response.headers.get("PAYMENT-RESPONSE")!) }
    }),
    ({ order, receipt }) => `order ${order.id} for $${order.amountUsd}, tx ${receipt.transaction}`
  )

  yield* step(
    "statement shows the payment",
    client.statement.activity({ urlParams: { limit: 50 } }).pipe(
      Effect.filterOrFail(
        (items) => items[0]?.tx === paid.receipt.transaction,
        () => "not on the statement"
      )
    ),
    (items) => `${items[0]!.type} $${items[0]!.usd} "${items[0]!.description}"`
  )

  const refill = yield* step(
    "the card runs low; the agent refills it on chain",
    // The executed decision's event comes in the transaction that records it, right before the refill's.
    Effect.zip(
      awaitEvent(
        "executed refill decision",
        (event): event is DecisionEvent =>
          event.event === "decision" && event.data.action === "refill" && event.data.status === "executed"
      ),
      awaitEvent("refill", (event): event is RefillEvent => event.event === "refill")
    ),
    ([decision, item]) =>
      `refill event #${item.id}: $${item.data.usd}; decision ${decision.data.id} ${decision.data.status}: ` +
      `${decision.data.reason} Transactions: ${decision.data.txs.join(", ")}`
  )

  yield* step(
    "statement shows the refill",
    client.statement.activity({ urlParams: { limit: 50 } }).pipe(
      Effect.filterOrFail(
        (items) => items[0]?.type === "refill" && items[0].tx === refill[1].data.tx,
        () => "no refill on the statement"
      )
    ),
    (items) => `${items[0]!.type} $${items[0]!.usd}, tx ${items[0]!.tx} (decision ${refill[0].data.id})`
  )

  // A weekly spend now, so that the previews have something to forecast.
  yield* client.strategy.put({ payload: { targets: { NVDA: 0.5, SPY: 0.5 }, weeklySpendUsd: 140 } })
  yield* step(
    "preview: Friday 15:40 ET",
    client.agent.preview({ urlParams: { at: Date.parse("2026-11-20T20:40:00Z") } }),
    (p) => `${p.decision.action}: ${p.decision.reason}`
  )
  yield* step(
    "preview: Saturday noon ET",
    client.agent.preview({ urlParams: { at: Date.parse("2026-11-21T17:00:00Z") } }),
    (p) => `${p.decision.action}: ${p.decision.reason}`
  )
  yield* step("decision log", client.agent.decisions({ urlParams: { limit: 5 } }), (decisions) =>
    decisions.map((d) => `#${d.id} ${d.action} ${d.status}`).join(", ")
  )
})

const program = demo.pipe(
  Effect.scoped,
  Effect.provide(FetchHttpClient.layer),
  Effect.ensuring(Effect.sync(() => rmSync(dataDir, { recursive: true, force: true })))
)

Effect.runPromiseExit(program).then((exit) => {
  if (exit._tag === "Success") {
    line("demo complete")
    process.exit(0)
  }
  const failure = exit.cause
  line(`demo FAILED: ${String(failure._tag === "Fail" ? (failure.error as Error).message : failure)}`)
  process.exit(1)
})
