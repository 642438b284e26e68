/**
 * The built-in sandbox card network: it plays the processor and a merchant's terminal while
 * `CARD_NETWORK=sandbox` (the default). Like a real network it checks the number, expiry and CVV
 * against the issued cards first (a mismatch is declined `card_verification_failed` and the issuer
 * is never asked); then it sends the issuer Lithic's signed Auth Stream Access request over real
 * HTTP to this service's own `/card-network/messages` (the listener's loopback address, or
 * `CARD_SANDBOX_NETWORK_URL`), exactly as Lithic would, and reports the answer. Increments are ASA
 * requests on the same transaction; reversals, clearings, refunds and expiries are Events API
 * `card_transaction.updated` webhooks carrying the transaction's events so far.
 *
 * It keeps its own records (`card_sandbox_transactions`), as a processor keeps its own ledger.
 */
import { randomBytes } from "node:crypto"
import { FetchHttpClient, HttpClient, HttpClientRequest } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { Clock, Context, Duration, Effect, Layer, Option, Schema } from "effect"
import { CardNotFound } from "../cards/Api.js"
import { Cards } from "../cards/Cards.js"
import { awaitServerAddress, type ServerAddress } from "../runtime/ServerAddress.js"
import { repository } from "../storage/Sql.js"
import type { CardAuthorization, SandboxAnswer, SandboxSwipe } from "./Api.js"
import { authorizationSettings, networkSettings } from "./AuthorizationSettings.js"
import { Authorizations } from "./Authorizations.js"
import type { Channel, LifecycleEvent, Merchant } from "./CardNetwork.js"
import { AsaResponse, asaRequestBody, networkToken, transactionUpdatedBody } from "./LithicWire.js"
import { sign } from "./StandardWebhooks.js"

/**
 * How much longer than the issuer's own budget (CARD_AUTHORIZATION_BUDGET) the sandbox network waits
 * for its answer before it stands in: the issuer always answers within its budget, so the sandbox
 * reports the issuer's decision, as a processor whose timeout is above the issuer's budget does.
 */
const NETWORK_MARGIN = Duration.seconds(2)

/**
 * The sandbox network's signing key (what the CardNetwork port verifies with while the sandbox is
 * the network); none with another network, and the sandbox's routes are then not served.
 */
export class SandboxNetworkKey extends Context.Tag("app/SandboxNetworkKey")<
  SandboxNetworkKey,
  Option.Option<Buffer>
>() {}

const StoredEvent = Schema.Struct({
  id: Schema.String,
  type: Schema.Literal("adjustment", "reversal", "expiry", "clearing", "refund"),
  cents: Schema.Number
})

const TransactionRow = Schema.Struct({
  token: Schema.String,
  cardToken: Schema.String,
  lastFour: Schema.String,
  merchant: Schema.Struct({
    name: Schema.String,
    mcc: Schema.String,
    city: Schema.NullOr(Schema.String),
    country: Schema.String
  }),
  channel: Schema.Literal("in_person", "online"),
  authorizedCents: Schema.NumberFromString,
  clearedCents: Schema.NumberFromString,
  events: Schema.Array(StoredEvent),
  status: Schema.Literal("PENDING", "SETTLED", "VOIDED", "EXPIRED")
})
type TransactionRow = typeof TransactionRow.Type

const cents = (amountUsd: string) => Math.round(Number(amountUsd) * 100)

/** A message id as Standard Webhooks senders make them. */
const newMessageId = () => `msg_${randomBytes(16).toString("hex")}`

/** Where the sandbox network posts: the override, or this process's own listener. */
const ownEndpoint = Effect.gen(function* () {
  const { sandboxNetworkUrl } = yield* networkSettings
  if (Option.isSome(sandboxNetworkUrl)) return sandboxNetworkUrl.value
  const address = yield* awaitServerAddress
  if (address._tag !== "TcpAddress") {
    return yield* Effect.dieMessage("CARD_SANDBOX_NETWORK_URL must be set when the server listens on a unix socket")
  }
  const host = ["0.0.0.0", "::", ""].includes(address.hostname) ? "127.0.0.1" : address.hostname
  return `http://${host.includes(":") ? `[${host}]` : host}:${address.port}/card-network/messages`
})

const makeRepo = Effect.gen(function* () {
  const sql = yield* SqlClient.SqlClient
  const find = (token: string) =>
    sql`SELECT token, card_token, last_four, merchant, channel, authorized_cents::text, cleared_cents::text, events, status
        FROM card_sandbox_transactions WHERE token = ${token}`.pipe(
      Effect.flatMap((rows) =>
        rows.length === 0
          ? Effect.succeed(Option.none())
          : Effect.map(Schema.decodeUnknown(TransactionRow)(rows[0]), Option.some)
      )
    )
  const insert = (row: {
    readonly token: string
    readonly cardToken: string
    readonly lastFour: string
    readonly merchant: Merchant
    readonly channel: Channel
    readonly authorizedCents: number
    readonly at: Date
  }) =>
    sql`INSERT INTO card_sandbox_transactions
          (token, card_token, last_four, merchant, channel, authorized_cents, status, created_at)
        VALUES (${row.token}, ${row.cardToken}, ${row.lastFour}, ${JSON.stringify(row.merchant)}::json, ${row.channel},
                ${row.authorizedCents}, 'PENDING', ${row.at})`
  const save = (row: TransactionRow) =>
    sql`UPDATE card_sandbox_transactions SET authorized_cents = ${row.authorizedCents},
          cleared_cents = ${row.clearedCents}, events = ${JSON.stringify(row.events)}::json, status = ${row.status}
        WHERE token = ${row.token}`
  return repository("SandboxNetworkRepo", { find, insert, save })
})

export interface SandboxNetworkShape {
  /** A swipe at a terminal: checked, then asked of the issuer. */
  readonly authorize: (swipe: SandboxSwipe) => Effect.Effect<typeof SandboxAnswer.Type>
  readonly increment: (id: string, amountUsd: string) => Effect.Effect<typeof SandboxAnswer.Type, CardNotFound>
  readonly reverse: (id: string, amountUsd: string | undefined) => Effect.Effect<CardAuthorization, CardNotFound>
  readonly clear: (id: string, amountUsd: string | undefined) => Effect.Effect<CardAuthorization, CardNotFound>
  readonly refund: (id: string, amountUsd: string) => Effect.Effect<CardAuthorization, CardNotFound>
  readonly expire: (id: string) => Effect.Effect<CardAuthorization, CardNotFound>
}

export class SandboxNetwork extends Context.Tag("app/SandboxNetwork")<SandboxNetwork, SandboxNetworkShape>() {}

const makeSandboxNetwork = Effect.gen(function* () {
  const repo = yield* makeRepo
  const cards = yield* Cards
  const authorizations = yield* Authorizations
  const key = Option.getOrThrowWith(
    yield* SandboxNetworkKey,
    () => new Error("the sandbox network is not the card network")
  )
  const http = yield* HttpClient.HttpClient
  // Resolved at the first swipe: the server listens only after this service is built.
  const context = yield* Effect.context<ServerAddress>()
  const endpoint = yield* Effect.cached(ownEndpoint.pipe(Effect.provide(context)))
  const { budget } = yield* authorizationSettings
  const unknown = (id: string) => new CardNotFound({ error: `the sandbox network has no approved authorization ${id}` })

  /** POSTs a signed message to the issuer; its JSON answer, or none when it did not answer in time. */
  const deliver = (body: unknown, messageId = newMessageId()) =>
    Effect.gen(function* () {
      const text = JSON.stringify(body)
      const request = HttpClientRequest.post(yield* endpoint).pipe(
        HttpClientRequest.setHeaders(sign(key, messageId, text, yield* Clock.currentTimeMillis)),
        HttpClientRequest.bodyText(text, "application/json")
      )
      const response = yield* http.execute(request)
      if (response.status !== 200) {
        yield* Effect.logWarning(`the issuer answered the sandbox network ${response.status}`)
        return Option.none<unknown>()
      }
      return Option.some(yield* response.json)
    }).pipe(
      Effect.scoped,
      Effect.timeout(Duration.sum(budget, NETWORK_MARGIN)),
      Effect.catchAll((error) =>
        Effect.as(Effect.logWarning(`the sandbox network got no answer from the issuer: ${error._tag}`), Option.none())
      ),
      Effect.withSpan("SandboxNetwork.deliver")
    )

  /**
   * Asks the issuer about an amount on a transaction, and answers as the terminal shows it: approved
   * when the issuer answered APPROVED in time; a decline with the issuer's own reason from its
   * records (the wire carries only Lithic's coarser codes), `stand_in` when it did not answer.
   */
  const ask = (
    row: Pick<TransactionRow, "token" | "cardToken" | "lastFour" | "merchant" | "channel">,
    amount: number
  ) =>
    Effect.gen(function* () {
      const messageId = newMessageId()
      const body = asaRequestBody({
        token: row.token,
        card: { token: row.cardToken, lastFour: row.lastFour },
        cents: amount,
        merchant: row.merchant,
        channel: row.channel,
        created: new Date(yield* Clock.currentTimeMillis)
      })
      const answer = yield* deliver(body, messageId)
      const decoded = Option.flatMap(answer, (json) => Option.getRight(Schema.decodeUnknownEither(AsaResponse)(json)))
      if (Option.isNone(decoded) || decoded.value.token !== row.token) {
        return { id: row.token, approved: false, reason: "stand_in" } satisfies typeof SandboxAnswer.Type
      }
      if (decoded.value.result === "APPROVED")
        return { id: row.token, approved: true } satisfies typeof SandboxAnswer.Type
      const reason = yield* authorizations.declineReason(row.token, messageId)
      return { id: row.token, approved: false, reason: Option.getOrElse(reason, () => "stand_in" as const) }
    })

  const authorize = (swipe: SandboxSwipe) =>
    Effect.gen(function* () {
      const token = networkToken()
      const face = yield* cards.faceForSwipe({ number: swipe.cardNumber, expiry: swipe.expiry, cvv: swipe.cvv })
      if (Option.isNone(face)) {
        return { id: token, approved: false, reason: "card_verification_failed" } satisfies typeof SandboxAnswer.Type
      }
      const row = {
        token,
        cardToken: face.value.token,
        lastFour: face.value.lastFour,
        merchant: {
          name: swipe.merchant.name,
          mcc: swipe.merchant.mcc,
          city: swipe.merchant.city ?? null,
          country: swipe.merchant.country
        },
        channel: swipe.channel ?? "in_person"
      } as const
      const answer = yield* ask(row, cents(swipe.amountUsd))
      if (answer.approved) {
        yield* repo.insert({
          ...row,
          authorizedCents: cents(swipe.amountUsd),
          at: new Date(yield* Clock.currentTimeMillis)
        })
      }
      return answer
    }).pipe(Effect.withSpan("SandboxNetwork.authorize"))

  const transaction = (id: string) =>
    Effect.flatMap(repo.find(id), Option.match({ onNone: () => Effect.fail(unknown(id)), onSome: Effect.succeed }))

  /** The issuer's record of the transaction, after a message. */
  const issuerView = (id: string) =>
    Effect.flatMap(
      authorizations.find(id),
      Option.match({ onNone: () => Effect.fail(unknown(id)), onSome: Effect.succeed })
    )

  /** Sends the transaction's events so far, with `event` added, as Lithic's `card_transaction.updated`. */
  const sendEvent = (
    row: TransactionRow,
    event: { readonly type: LifecycleEvent["type"]; readonly cents: number },
    next: Partial<Pick<TransactionRow, "authorizedCents" | "clearedCents" | "status">>
  ) =>
    Effect.gen(function* () {
      const updated: TransactionRow = {
        ...row,
        ...next,
        events: [...row.events, { id: networkToken(), type: event.type, cents: event.cents }]
      }
      yield* repo.save(updated)
      yield* deliver(
        transactionUpdatedBody({
          token: updated.token,
          cardToken: updated.cardToken,
          status: updated.status,
          merchant: updated.merchant,
          events: updated.events,
          at: new Date(yield* Clock.currentTimeMillis)
        })
      )
      return yield* issuerView(row.token)
    })

  const remaining = (row: TransactionRow) => Math.max(0, row.authorizedCents - row.clearedCents)

  return SandboxNetwork.of({
    authorize,
    increment: (id, amountUsd) =>
      Effect.gen(function* () {
        const row = yield* transaction(id)
        const answer = yield* ask(row, cents(amountUsd))
        if (answer.approved) yield* repo.save({ ...row, authorizedCents: row.authorizedCents + cents(amountUsd) })
        return answer
      }).pipe(Effect.withSpan("SandboxNetwork.increment")),
    reverse: (id, amountUsd) =>
      Effect.flatMap(transaction(id), (row) => {
        const amount = Math.min(amountUsd === undefined ? remaining(row) : cents(amountUsd), remaining(row))
        return sendEvent(
          row,
          { type: "reversal", cents: amount },
          { authorizedCents: row.authorizedCents - amount, status: amount >= remaining(row) ? "VOIDED" : row.status }
        )
      }),
    clear: (id, amountUsd) =>
      Effect.flatMap(transaction(id), (row) => {
        const amount = amountUsd === undefined ? remaining(row) : cents(amountUsd)
        return sendEvent(
          row,
          { type: "clearing", cents: amount },
          { clearedCents: row.clearedCents + amount, status: "SETTLED" }
        )
      }),
    refund: (id, amountUsd) =>
      Effect.gen(function* () {
        const row = yield* transaction(id)
        // A return is a transaction of its own on the card, from the same merchant.
        const token = networkToken()
        yield* deliver(
          transactionUpdatedBody({
            token,
            cardToken: row.cardToken,
            status: "SETTLED",
            merchant: row.merchant,
            events: [{ id: networkToken(), type: "refund", cents: cents(amountUsd) }],
            at: new Date(yield* Clock.currentTimeMillis)
          })
        )
        return yield* issuerView(id)
      }),
    expire: (id) =>
      Effect.flatMap(transaction(id), (row) =>
        sendEvent(row, { type: "expiry", cents: remaining(row) }, { status: "EXPIRED" })
      )
  })
})

export const SandboxNetworkLive = Layer.effect(SandboxNetwork, makeSandboxNetwork).pipe(
  Layer.provide(FetchHttpClient.layer)
)
