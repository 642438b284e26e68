/**
 * The API as the app calls it: the project's typed client (src/Client.ts, derived from the HttpApi)
 * on the browser's fetch, each call turned into a Promise that fails with an `AppError`: the API's
 * own `error` text with its `code`, the field it names (for messages shown at a form's field) and
 * what the person can do about it. A call that cannot reach the service marks the connection lost
 * (connection.ts), which recovers by itself.
 */
import { FetchHttpClient, type HttpClientError } from "@effect/platform"
import { Cause, Duration, Effect, Exit, Option, type ParseResult } from "effect"
import { type Client, makeClient } from "../src/Client.js"
import { describeIssue } from "../src/http/FieldMessages.js"
import { connectionLost } from "./connection.js"

/** The longest a call may take before the app says the service did not answer. */
const CALL_TIMEOUT = Duration.seconds(30)

/** What to do about an API error, by its code; the API's own message says what happened. */
const ADVICE: Readonly<Record<string, string>> = {
  UNAUTHORIZED: "Sign in again.",
  RATE_LIMITED: "Wait a minute, then try again.",
  CHALLENGE_EXPIRED: "Start the sign-in again.",
  CHALLENGE_UNKNOWN: "Start the sign-in again.",
  INVALID_SIGNATURE: "Sign with the account you chose, then try again.",
  CARD_REQUIRED: "Pass the identity check first: the card comes with it.",
  KYC_PROVIDER_ERROR: "The identity provider did not answer: try again in a moment.",
  KYC_DUPLICATE: "Sign in with the wallet that already holds the card for this document.",
  DATABASE_UNAVAILABLE: "Try again in a few seconds.",
  CHAIN_UNAVAILABLE: "The chain did not answer: try again in a few seconds.",
  PRICE_UNAVAILABLE: "A price feed did not answer: try again in a few seconds.",
  AGENT_WALLET_ERROR: "The agent wallet did not answer: try again in a moment.",
  SESSION_EXPIRED: "The agent wallet must sign in again in its exchange app.",
  NOT_LOGGED_IN: "The agent wallet must sign in to its exchange app.",
  STRATEGY_NOT_FOUND: "Set a strategy first.",
  ORDER_EXPIRED: "Create a new order.",
  ORDER_ALREADY_PAID: "Nothing more to pay.",
  PAYMENT_IN_PROGRESS: "Wait for the payment being settled.",
  INTERNAL: "Try again; if it keeps failing, the service's operators have the details in its logs."
}

/** A failed call, ready to show: `message` is the API's text, `advice` what to do. */
export class AppError extends Error {
  constructor(
    message: string,
    readonly code: string | undefined,
    readonly advice: string | undefined,
    /** The field the message is about (`targets`, `weeklySpendUsd`, ...), when it names one. */
    readonly fields: ReadonlyArray<{ readonly field: string; readonly message: string }> = []
  ) {
    super(message)
  }
}

/** "targets: weights must sum to 1 ...; weeklySpendUsd: ..." as one message per field. */
export const fieldMessages = (text: string) =>
  text.split("; ").flatMap((part) => {
    const match = /^([A-Za-z][\w.]*): (.+)$/s.exec(part)
    return match === null ? [] : [{ field: match[1]!, message: match[2]! }]
  })

const apiError = (message: string, code: string | undefined) =>
  new AppError(message, code, code === undefined ? undefined : ADVICE[code], fieldMessages(message))

const codeOf = (error: object): string | undefined => {
  const declared = (error.constructor as { readonly code?: unknown }).code
  return typeof declared === "string" ? declared : undefined
}

/** The body of a response the client did not expect, when it is the service's `{error, code}`. */
const bodyOf = (error: HttpClientError.ResponseError) =>
  error.response.json.pipe(
    Effect.map((body) => body as { readonly error?: unknown; readonly code?: unknown }),
    Effect.option,
    Effect.map(Option.getOrUndefined)
  )

const unreachable = () =>
  new AppError("The service cannot be reached.", "CONNECTION", "Check the connection; the app retries by itself.")

/** Any failure of a call as an AppError. */
const toAppError = (error: unknown): Effect.Effect<AppError> => {
  if (error instanceof AppError) return Effect.succeed(error)
  if (typeof error !== "object" || error === null || !("_tag" in error)) {
    return Effect.succeed(new AppError(String(error), undefined, undefined))
  }
  if (error._tag === "RequestError") return Effect.succeed(unreachable())
  if (error._tag === "ResponseError") {
    const response = error as HttpClientError.ResponseError
    return bodyOf(response).pipe(
      Effect.map((body) =>
        typeof body?.error === "string"
          ? apiError(body.error, typeof body.code === "string" ? body.code : undefined)
          : new AppError(
              `The service answered HTTP ${response.response.status}.`,
              undefined,
              "Try again; reload the page if it persists."
            )
      )
    )
  }
  if (error._tag === "ParseError") {
    // A request the schema refused before sending (a form's value), or an answer this app cannot read:
    // told field by field, in the words the service uses for the same schema.
    const message = describeIssue((error as ParseResult.ParseError).issue)
    return Effect.succeed(new AppError(message, "INVALID", "Check the values, then try again.", fieldMessages(message)))
  }
  if (error._tag === "PaymentRequired") {
    const body = (error as unknown as { readonly body: { readonly error?: string } }).body
    return Effect.succeed(apiError(body.error ?? "Payment required.", "PAYMENT_REQUIRED"))
  }
  if ("error" in error && typeof error.error === "string") return Effect.succeed(apiError(error.error, codeOf(error)))
  return Effect.succeed(new AppError(`Unexpected failure: ${String(error._tag)}`, undefined, undefined))
}

/** The client of the current token (a session has one token: made again only when it changes). */
let current: { readonly token: string | undefined; readonly client: Client } | undefined

/** The typed client, signed in with `token` or anonymous. */
export const clientFor = (token: string | undefined): Client => {
  if (current === undefined || current.token !== token) {
    const client = Effect.runSync(
      makeClient({ baseUrl: location.origin, ...(token === undefined ? {} : { token }) }).pipe(
        Effect.provide(FetchHttpClient.layer)
      )
    )
    current = { token, client }
  }
  return current.client
}

/** Runs one call; resolves with its answer or rejects with an AppError. */
export const run = async <A, E>(call: Effect.Effect<A, E>): Promise<A> => {
  const exit = await Effect.runPromiseExit(
    call.pipe(
      Effect.timeoutFail({
        duration: CALL_TIMEOUT,
        onTimeout: () => new AppError("The service did not answer in time.", "TIMEOUT", "Try again.")
      }),
      Effect.catchAll((error) => Effect.flatMap(toAppError(error), Effect.fail))
    )
  )
  if (Exit.isSuccess(exit)) return exit.value
  const failure = Cause.failureOption(exit.cause)
  const error = Option.isSome(failure)
    ? failure.value
    : new AppError("Something went wrong in this app.", undefined, "Reload the page.")
  if (error.code === "CONNECTION") connectionLost()
  throw error
}

/** An AppError from anything thrown (a wallet's refusal, a failed call). */
export const asAppError = (error: unknown): AppError => {
  if (error instanceof AppError) return error
  const message =
    typeof error === "object" && error !== null && "message" in error && typeof error.message === "string"
      ? error.message
      : String(error)
  return new AppError(message.split("\n")[0] ?? message, undefined, undefined)
}
