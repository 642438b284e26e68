/**
 * A JSON-RPC endpoint in front of a node (anvil), standing for one RPC provider of the same chain:
 * - `kill` closes it (its port refuses connections, open ones are cut) and `revive` listens again
 *   on the same port, as a provider that goes down and comes back;
 * - `stall` holds every request unanswered until `forward` (a provider that accepts and hangs);
 * - `dropTransactions` answers `eth_sendRawTransaction` with the transaction's hash and never
 *   passes it on (a node that took the transaction and lost it);
 * - `holdTransactions` keeps each `eth_sendRawTransaction` until it is let go (a broadcast on its
 *   way), every other call going through;
 * - `answerWithError` answers some methods (or every one) with a JSON-RPC error of its own under an
 *   HTTP status, as a provider that rate-limits us (429, `-32005`) or fails on its side.
 * It counts the requests it answered, by method.
 */
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from "node:http"
import type { Socket } from "node:net"
import { Effect } from "effect"
import { type Hex, keccak256 } from "viem"

/** The provider's own error, answered instead of passing the call on. */
export interface ProviderError {
  /** The methods answered so (every method when absent). */
  readonly methods?: ReadonlyArray<string>
  readonly httpStatus: number
  readonly error: { readonly code: number; readonly message: string }
  readonly retryAfter?: string
}

export interface RpcProxy {
  readonly url: string
  readonly kill: Effect.Effect<void>
  readonly revive: Effect.Effect<void>
  readonly stall: () => void
  readonly forward: () => void
  readonly dropTransactions: (drop: boolean) => void
  /** While `hold`, broadcasts wait here; `false` passes those held on. */
  readonly holdTransactions: (hold: boolean) => void
  /** Answers with `fault` from now on; `undefined` passes every call on again. */
  readonly answerWithError: (fault: ProviderError | undefined) => void
  /** Calls answered with the provider error so far, of `method` or of every method. */
  readonly errorsAnswered: (method?: string) => number
  /** Broadcasts held now. */
  readonly heldTransactions: () => number
  /** Requests answered so far, of `method` or of every method. */
  readonly answered: (method?: string) => number
  /** Requests answered so far by label: the method, and for `eth_call` the contract called (`eth_call <to>`). */
  readonly answeredByLabel: () => ReadonlyMap<string, number>
}

/** A proxy to `target` (an http URL) on a free local port, closed with the scope. */
export const startRpcProxy = (target: string) =>
  Effect.acquireRelease(
    Effect.async<RpcProxy & { readonly close: () => Promise<void> }>((resume) => {
      const node = new URL(target)
      const sockets = new Set<Socket>()
      const held: Array<() => void> = []
      const counts = new Map<string, number>()
      const errorCounts = new Map<string, number>()
      let providerError: ProviderError | undefined
      let stalled = false
      let dropping = false
      let holding = false
      const heldBroadcasts: Array<() => void> = []
      let port = 0

      const count = (method: string) => counts.set(method, (counts.get(method) ?? 0) + 1)
      const labels = new Map<string, number>()
      const labelled = (label: string) => labels.set(label, (labels.get(label) ?? 0) + 1)
      const pass = (body: string, response: ServerResponse) => {
        const upstream = httpRequest(
          node,
          {
            method: "POST",
            headers: { "content-type": "application/json", "content-length": Buffer.byteLength(body) }
          },
          (answer: IncomingMessage) => {
            response.writeHead(answer.statusCode ?? 502, { "content-type": "application/json" })
            answer.pipe(response)
          }
        )
        upstream.on("error", () => response.destroy())
        upstream.end(body)
      }
      const handle = (request: IncomingMessage, response: ServerResponse) => {
        const chunks: Array<Buffer> = []
        request.on("data", (chunk: Buffer) => chunks.push(chunk))
        request.on("end", () => {
          const body = Buffer.concat(chunks).toString("utf8")
          const answer = () => {
            const call = JSON.parse(body) as { id: unknown; method: string; params: ReadonlyArray<unknown> }
            count(call.method)
            if (call.method === "eth_call")
              labelled(
                `eth_call ${String((call.params[0] as { to?: unknown })?.to).toLowerCase()} ${String(call.params[1] ?? "latest")}`
              )
            else labelled(call.method)
            if (
              providerError !== undefined &&
              (providerError.methods === undefined || providerError.methods.includes(call.method))
            ) {
              errorCounts.set(call.method, (errorCounts.get(call.method) ?? 0) + 1)
              response.writeHead(providerError.httpStatus, {
                "content-type": "application/json",
                ...(providerError.retryAfter === undefined ? {} : { "retry-after": providerError.retryAfter })
              })
              response.end(JSON.stringify({ jsonrpc: "2.0", id: call.id, error: providerError.error }))
              return
            }
            if (dropping && call.method === "eth_sendRawTransaction") {
              const result = keccak256(call.params[0] as Hex)
              response.writeHead(200, { "content-type": "application/json" })
              response.end(JSON.stringify({ jsonrpc: "2.0", id: call.id, result }))
              return
            }
            pass(body, response)
          }
          if (stalled) held.push(answer)
          else if (holding && (JSON.parse(body) as { method?: unknown }).method === "eth_sendRawTransaction")
            heldBroadcasts.push(answer)
          else answer()
        })
      }
      const server = createServer(handle)
      server.on("connection", (socket) => {
        sockets.add(socket)
        socket.on("close", () => sockets.delete(socket))
      })
      const listen = (onListening: () => void) => server.listen(port, "127.0.0.1", onListening)
      const close = () =>
        new Promise<void>((done) => {
          held.splice(0)
          heldBroadcasts.splice(0)
          for (const socket of sockets) socket.destroy()
          server.close(() => done())
        })
      listen(() => {
        const address = server.address()
        port = typeof address === "object" && address !== null ? address.port : 0
        resume(
          Effect.succeed({
            url: `http://127.0.0.1:${port}`,
            kill: Effect.promise(close),
            revive: Effect.async<void>((done) => {
              listen(() => done(Effect.void))
            }),
            stall: () => {
              stalled = true
            },
            forward: () => {
              stalled = false
              for (const answer of held.splice(0)) answer()
            },
            dropTransactions: (drop) => {
              dropping = drop
            },
            holdTransactions: (hold) => {
              holding = hold
              if (!hold) for (const answer of heldBroadcasts.splice(0)) answer()
            },
            heldTransactions: () => heldBroadcasts.length,
            answerWithError: (fault) => {
              providerError = fault
            },
            errorsAnswered: (method) =>
              method === undefined
                ? [...errorCounts.values()].reduce((sum, n) => sum + n, 0)
                : (errorCounts.get(method) ?? 0),
            answered: (method) =>
              method === undefined ? [...counts.values()].reduce((sum, n) => sum + n, 0) : (counts.get(method) ?? 0),
            answeredByLabel: () => new Map(labels),
            close: () => (server.listening ? close() : Promise.resolve())
          })
        )
      })
    }),
    (proxy) => Effect.promise(proxy.close)
  ).pipe(Effect.map((proxy): RpcProxy => proxy))
