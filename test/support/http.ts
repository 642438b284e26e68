import { HttpClient, HttpClientRequest } from "@effect/platform"
import { Effect } from "effect"

export interface RawResponse {
  readonly status: number
  readonly headers: Readonly<Record<string, string>>
  // biome-ignore lint/suspicious/noExplicitAny: test bodies are inspected field by field
  readonly body: any
}

/** Sends a request to the test server and reads the whole response, whatever its status. */
export const send = (
  method: "GET" | "POST" | "PUT" | "DELETE" | "OPTIONS",
  path: string,
  options: {
    readonly json?: unknown
    readonly text?: string
    /** A URL-encoded form body. */
    readonly form?: Record<string, string>
    readonly headers?: Record<string, string>
  } = {}
) =>
  Effect.gen(function* () {
    const client = yield* HttpClient.HttpClient
    let request = HttpClientRequest.make(method)(path).pipe(HttpClientRequest.setHeaders(options.headers ?? {}))
    if (options.json !== undefined) request = HttpClientRequest.bodyUnsafeJson(request, options.json)
    if (options.text !== undefined) request = HttpClientRequest.bodyText(request, options.text, "application/json")
    if (options.form !== undefined) request = HttpClientRequest.bodyUrlParams(request, options.form)
    const response = yield* client.execute(request)
    const text = yield* response.text
    let body: unknown = text
    try {
      body = text === "" ? undefined : JSON.parse(text)
    } catch {}
    return { status: response.status, headers: response.headers, body } as RawResponse
  }).pipe(Effect.scoped, Effect.orDie)

export const bearer = (token: string) => ({ authorization: `Bearer ${token}` })
