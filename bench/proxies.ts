/**
 * Counting proxies for the count benchmark, at the transport so that nothing in the servers has to
 * cooperate:
 * - a JSON-RPC proxy in front of anvil counts every call (each entry of a batch), labelled by
 *   method, and for `eth_call`/`eth_estimateGas` by the USD1 function called;
 * - a TCP proxy (test/support/TcpProxy.ts) in front of PostgreSQL reads the frontend protocol and
 *   counts executed statements: every simple Query ('Q') and every extended-protocol Execute ('E'),
 *   labelled by verb and table from the statement text (Parse 'P' names the text, Bind 'B' ties a
 *   portal to it).
 */
import { createServer as createHttpServer } from "node:http"
import type { Socket } from "node:net"
import { Effect } from "effect"
import { decodeFunctionData, erc20Abi, type Hex, multicall3Abi } from "viem"
import { Usd1Artifact } from "../src/chain/contracts/artifacts.js"
import { startTcpProxy } from "../test/support/TcpProxy.js"

export type Counts = ReadonlyMap<string, number>

export class Counter {
  private readonly counts = new Map<string, number>()
  add(label: string) {
    this.counts.set(label, (this.counts.get(label) ?? 0) + 1)
  }
  snapshot(): Counts {
    return new Map(this.counts)
  }
}

export const difference = (after: Counts, before: Counts): Counts =>
  new Map([...after].map(([label, n]) => [label, n - (before.get(label) ?? 0)] as const).filter(([, n]) => n !== 0))

export const total = (counts: Counts) => [...counts.values()].reduce((sum, n) => sum + n, 0)

const functionName = (data: unknown): string => {
  if (typeof data !== "string") return "?"
  for (const abi of [Usd1Artifact.abi, erc20Abi]) {
    try {
      return decodeFunctionData({ abi, data: data as Hex }).functionName
    } catch {}
  }
  try {
    // A Multicall3 batch: the functions it calls.
    const { args } = decodeFunctionData({ abi: multicall3Abi, data: data as Hex })
    const calls = args[0] as ReadonlyArray<{ readonly callData: Hex }>
    return `multicall: ${calls.map((call) => functionName(call.callData)).join(" + ")}`
  } catch {}
  return data.slice(0, 10)
}

const methodOf = (call: unknown) => {
  const { method } = (call ?? {}) as { method?: unknown }
  return typeof method === "string" ? method : "?"
}

const rpcLabel = (call: unknown) => {
  const { params } = (call ?? {}) as { params?: unknown }
  const name = methodOf(call)
  if (name !== "eth_call" && name !== "eth_estimateGas") return name
  const tx = (Array.isArray(params) ? params[0] : undefined) as { to?: unknown; data?: unknown; input?: unknown }
  if (tx?.to === undefined || tx.to === null) return `${name}(deployless signature check)`
  return `${name}(${functionName(tx.data ?? tx.input)})`
}

/**
 * A JSON-RPC proxy to `target`; its URL and counter. Closed with the scope. With `delayMs`, every
 * HTTP request waits that long before it is forwarded: a remote provider's round trip (a batch is
 * one request, one round trip, as it would be over the network).
 */
export const startRpcProxy = (
  target: string,
  // `methods`: each call counted by its method alone. Labelling a multicall decodes every call in
  // it through the ABIs: about 60 ms of this process's CPU per 500 reads, more than anvil spends.
  options: { readonly delayMs?: number; readonly labels?: "functions" | "methods" } = {}
) =>
  Effect.acquireRelease(
    Effect.async<{ url: string; counter: Counter; close: () => Promise<void> }>((resume) => {
      const counter = new Counter()
      const server = createHttpServer((req, res) => {
        const chunks: Array<Buffer> = []
        req.on("data", (chunk: Buffer) => chunks.push(chunk))
        req.on("end", () => {
          const body = Buffer.concat(chunks)
          try {
            const parsed: unknown = JSON.parse(body.toString("utf8"))
            for (const call of Array.isArray(parsed) ? parsed : [parsed]) {
              counter.add(options.labels === "methods" ? methodOf(call) : rpcLabel(call))
            }
          } catch {
            counter.add("(unparsable)")
          }
          const forward = () => fetch(target, { method: "POST", headers: { "content-type": "application/json" }, body })
          const delayed =
            options.delayMs === undefined
              ? forward()
              : new Promise<void>((wait) => setTimeout(wait, options.delayMs)).then(forward)
          delayed.then(
            async (response) => {
              const text = await response.text()
              res.writeHead(response.status, { "content-type": "application/json" })
              res.end(text)
            },
            (error: unknown) => {
              res.writeHead(502)
              res.end(String(error))
            }
          )
        })
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(
          Effect.succeed({
            url: `http://127.0.0.1:${port}`,
            counter,
            close: () =>
              new Promise<void>((done) => {
                server.closeAllConnections()
                server.close(() => done())
              })
          })
        )
      })
    }),
    (proxy) => Effect.promise(proxy.close)
  )

const sqlLabel = (text: string | undefined) => {
  if (text === undefined) return "(unknown statement)"
  const sql = text.replace(/\s+/g, " ").trim()
  const verb = (/^\w+/.exec(sql)?.[0] ?? "?").toUpperCase()
  if (verb === "WITH") {
    // One statement doing several things (data-modifying CTEs): its writes, in order.
    const writes = [...sql.matchAll(/\b(UPDATE|INSERT INTO|DELETE FROM)\s+"?(\w+)/gi)].map(
      ([, write, table]) => `${write!.split(" ")[0]!.toUpperCase()} ${table}`
    )
    return writes.length > 0 ? `WITH(${[...new Set(writes)].join(" + ")})` : "WITH(SELECT)"
  }
  const table = /\b(?:FROM|INTO|UPDATE)\s+"?(\w+)/i.exec(sql)?.[1]
  return table === undefined ? verb : `${verb} ${table}`
}

const cString = (body: Buffer, offset: number) => {
  const end = body.indexOf(0, offset)
  return { text: body.toString("utf8", offset, end), next: end + 1 }
}

const SSL_REQUEST = 80877103
const GSSENC_REQUEST = 80877104

/** Follows one connection's frontend messages and counts the statements it executes. */
class FrontendCounter {
  private buffer = Buffer.alloc(0)
  private startup = true
  private readonly statements = new Map<string, string>()
  private readonly portals = new Map<string, string | undefined>()

  constructor(private readonly counter: Counter) {}

  push(chunk: Buffer) {
    this.buffer = Buffer.concat([this.buffer, chunk])
    for (;;) {
      if (this.startup) {
        // Untyped: Int32 length, Int32 code. SSL/GSS requests are followed by the real startup message.
        if (this.buffer.length < 8) return
        const length = this.buffer.readInt32BE(0)
        if (this.buffer.length < length) return
        const code = this.buffer.readInt32BE(4)
        this.startup = code === SSL_REQUEST || code === GSSENC_REQUEST
        this.buffer = this.buffer.subarray(length)
        continue
      }
      if (this.buffer.length < 5) return
      const length = this.buffer.readInt32BE(1)
      if (this.buffer.length < 1 + length) return
      this.message(String.fromCharCode(this.buffer[0]!), this.buffer.subarray(5, 1 + length))
      this.buffer = this.buffer.subarray(1 + length)
    }
  }

  private message(type: string, body: Buffer) {
    if (type === "Q") {
      this.counter.add(sqlLabel(cString(body, 0).text))
    } else if (type === "P") {
      const name = cString(body, 0)
      this.statements.set(name.text, cString(body, name.next).text)
    } else if (type === "B") {
      const portal = cString(body, 0)
      this.portals.set(portal.text, this.statements.get(cString(body, portal.next).text))
    } else if (type === "E") {
      this.counter.add(sqlLabel(this.portals.get(cString(body, 0).text)))
    }
  }
}

/** A TCP proxy to the PostgreSQL of `databaseUrl`; the same URL through the proxy, and its counter. */
export const startPgProxy = (databaseUrl: string) =>
  Effect.gen(function* () {
    const upstream = new URL(databaseUrl)
    const counter = new Counter()
    const frontends = new WeakMap<Socket, FrontendCounter>()
    const proxy = yield* startTcpProxy(
      { host: upstream.hostname, port: Number(upstream.port) },
      {
        onClientData: (client, chunk) => {
          const frontend = frontends.get(client) ?? new FrontendCounter(counter)
          frontends.set(client, frontend)
          frontend.push(chunk)
        }
      }
    )
    return { url: proxy.url(databaseUrl), counter }
  })
