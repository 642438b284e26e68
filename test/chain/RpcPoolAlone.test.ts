/**
 * One JSON-RPC endpoint alone: its read takes the caller's signal (no controller of its own), so a
 * read its caller interrupts is abandoned at the endpoint (the request's connection closed), as a
 * hedged read abandons the slower of two. The endpoint is a small server that answers the pool's
 * start-up check and holds every other call.
 */
import http from "node:http"
import type { AddressInfo } from "node:net"
import { it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { rpcPool } from "../../src/chain/RpcPool.js"
import { eventually } from "../support/wait.js"

/** The reads' own bound: far beyond the wait below, so only the abandonment can close the request in time. */
const READ_BOUND_MS = 600_000

it.live("a read its caller interrupts is abandoned at the one endpoint", () =>
  Effect.scoped(
    Effect.gen(function* () {
      const held = { reached: 0, closed: 0 }
      const server = http.createServer((request, response) => {
        let body = ""
        request.on("data", (chunk: Buffer) => {
          body += chunk.toString()
        })
        request.on("end", () => {
          const { id, method } = JSON.parse(body) as { id: number; method: string }
          if (method === "eth_chainId") return response.end(JSON.stringify({ jsonrpc: "2.0", id, result: "0x7a69" }))
          held.reached++
          response.on("close", () => {
            held.closed++
          })
        })
      })
      yield* Effect.acquireRelease(
        Effect.async<void>((resume) => void server.listen(0, "127.0.0.1", () => resume(Effect.void))),
        () =>
          Effect.sync(() => {
            server.closeAllConnections()
            server.close()
          })
      )
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
      const pool = yield* rpcPool([url], { chainId: 31337, readTimeoutMs: READ_BOUND_MS, probeIntervalMs: 60_000 })
      const rpc = pool.client({ timeoutMs: READ_BOUND_MS, retryUnanswered: true })
      const reading = yield* Effect.fork(Effect.tryPromise((signal) => rpc.request("eth_blockNumber", [], signal)))
      yield* eventually(
        "the read to reach the endpoint",
        Effect.sync(() => held.reached),
        (n) => n === 1
      )
      yield* Fiber.interrupt(reading)
      yield* eventually(
        "the endpoint to see the read's request closed",
        Effect.sync(() => held.closed),
        (n) => n === 1
      )
    })
  )
)
