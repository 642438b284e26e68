/**
 * A TCP proxy in front of a server (PostgreSQL, anvil), to watch or break the connection without
 * the server or the client cooperating:
 * - `forward` (the start): bytes flow both ways;
 * - `stall`: connections are accepted and kept, but no byte goes through either way (a server that
 *   accepts TCP and never answers); what was held flows on when forwarding resumes;
 * - `refuse`: every connection, open or new, is cut (a server that is down).
 * `onClientData` sees every chunk a client sends (the count benchmark reads PostgreSQL's protocol).
 */
import { connect, createServer, type Socket } from "node:net"
import { Effect } from "effect"

export type ProxyMode = "forward" | "stall" | "refuse"

export interface TcpProxy {
  readonly port: number
  /** `target` with the proxy's host and port, e.g. a database URL through the proxy. */
  readonly url: (target: string) => string
  readonly setMode: (mode: ProxyMode) => void
  /** Connections accepted so far. */
  readonly accepted: () => number
}

interface Pair {
  readonly client: Socket
  readonly backend: Socket
  /** Chunks held while stalled, per direction. */
  readonly held: { readonly up: Array<Buffer>; readonly down: Array<Buffer> }
}

/** A proxy to `host:port` on a free local port, closed with the scope. */
export const startTcpProxy = (
  target: { readonly host: string; readonly port: number },
  options: { readonly onClientData?: (client: Socket, chunk: Buffer) => void } = {}
) =>
  Effect.acquireRelease(
    Effect.async<{ proxy: TcpProxy; close: () => Promise<void> }>((resume) => {
      let mode: ProxyMode = "forward"
      let accepted = 0
      const pairs = new Set<Pair>()
      const cut = (pair: Pair) => {
        pair.client.destroy()
        pair.backend.destroy()
        pairs.delete(pair)
      }
      const flush = (pair: Pair) => {
        for (const chunk of pair.held.up.splice(0)) pair.backend.write(chunk)
        for (const chunk of pair.held.down.splice(0)) pair.client.write(chunk)
      }
      const server = createServer((client) => {
        accepted++
        if (mode === "refuse") {
          client.destroy()
          return
        }
        const backend = connect(target.port, target.host)
        const pair: Pair = { client, backend, held: { up: [], down: [] } }
        pairs.add(pair)
        client.on("data", (chunk: Buffer) => {
          options.onClientData?.(client, chunk)
          if (mode === "forward") backend.write(chunk)
          else pair.held.up.push(chunk)
        })
        backend.on("data", (chunk: Buffer) => {
          if (mode === "forward") client.write(chunk)
          else pair.held.down.push(chunk)
        })
        for (const socket of [client, backend]) {
          socket.on("error", () => cut(pair))
          socket.on("close", () => cut(pair))
        }
      })
      server.listen(0, "127.0.0.1", () => {
        const address = server.address()
        const port = typeof address === "object" && address !== null ? address.port : 0
        resume(
          Effect.succeed({
            proxy: {
              port,
              url: (text) => {
                const url = new URL(text)
                url.hostname = "127.0.0.1"
                url.port = String(port)
                return url.toString()
              },
              setMode: (next) => {
                mode = next
                if (next === "refuse") for (const pair of pairs) cut(pair)
                if (next === "forward") for (const pair of pairs) flush(pair)
              },
              accepted: () => accepted
            },
            close: () =>
              new Promise<void>((done) => {
                for (const pair of pairs) cut(pair)
                server.close(() => done())
              })
          })
        )
      })
    }),
    ({ close }) => Effect.promise(close)
  ).pipe(Effect.map(({ proxy }) => proxy))
