/**
 * (d) sign-in: challenge + sign + verify over HTTP at concurrency 10, each with a fresh key,
 * against the rate at which one process recovers the signer of such a message
 * (`recoverMessageAddress`), the one unavoidable computation of a sign-in.
 */
import { createRequire } from "node:module"
import { Effect } from "effect"
import { type Address, bytesToHex, concat, type Hex, hashMessage, hexToBytes } from "viem"
import { generatePrivateKey, publicKeyToAddress } from "viem/accounts"
import { alternating, expectJson, postJson, type RatioRow, runConcurrently, runPeer, type Section } from "./harness.js"

const CONCURRENCY = 10

/** A wallet of the load: its address and its EIP-191 signature of a message. */
export interface BenchWallet {
  readonly address: Address
  readonly signMessage: (message: string) => Hex
}

/** libsecp256k1's binding (the service's own recovery uses it too: src/chain/Secp256k1.ts). */
const curve = createRequire(import.meta.url)("secp256k1/bindings") as {
  readonly publicKeyCreate: (privateKey: Uint8Array, compressed: boolean) => Uint8Array
  readonly ecdsaSign: (hash: Uint8Array, privateKey: Uint8Array) => { signature: Uint8Array; recid: number }
}

/**
 * A fresh wallet that signs in libsecp256k1: the load generator shares the two cores with the
 * service, so its signatures should cost it as little as they can (viem's take ~1.5 ms each).
 */
const freshWallet = (): BenchWallet => {
  const key = hexToBytes(generatePrivateKey())
  return {
    address: publicKeyToAddress(bytesToHex(curve.publicKeyCreate(key, false))),
    signMessage: (message) => {
      const { signature, recid } = curve.ecdsaSign(hexToBytes(hashMessage(message)), key)
      return concat([bytesToHex(signature), recid === 0 ? "0x1b" : "0x1c"])
    }
  }
}

/** One sign-in; answers its bearer token. `plainFetch` lets the count benchmark see each request. */
export const signIn = async (
  baseUrl: string,
  account: BenchWallet = freshWallet(),
  plainFetch: typeof postJson = postJson
) => {
  const { message } = await expectJson<{ message: string }>(
    await plainFetch(`${baseUrl}/auth/challenge`, { address: account.address })
  )
  const signature = account.signMessage(message)
  const { token } = await expectJson<{ token: string }>(
    await plainFetch(`${baseUrl}/auth/verify`, { message, signature })
  )
  if (token.length === 0) throw new Error("no token")
  return token
}

export const freshAccounts = (count: number) => Array.from({ length: count }, freshWallet)

interface Run {
  readonly perSecond: number
  readonly cpuMs: number
  readonly failures: number
  /** The load generator's own CPU per sign-in (it signs each challenge on the same cores), service runs only. */
  readonly clientCpuMs?: number
}

export const signInSection: Section = {
  name: "signin",
  about: "sign-ins at concurrency 10 against one process's recoverMessageAddress rate",
  run: (ctx) =>
    Effect.gen(function* () {
      const service = yield* ctx.sharedService
      const runs = { service: [] as Array<Run>, recover: [] as Array<Run> }
      for (let round = 0; round < ctx.sizes.rounds; round++) {
        for (const side of alternating(round, "service" as const, "recover" as const)) {
          const run: Run =
            side === "service"
              ? yield* Effect.promise(async () => {
                  const warm = freshAccounts(round === 0 ? ctx.sizes.primeSignIns : ctx.sizes.warmSignIns)
                  await runConcurrently(CONCURRENCY, warm.length, (_, i) => signIn(service.baseUrl, warm[i]!))
                  const accounts = freshAccounts(ctx.sizes.signIns)
                  const cpuBefore = service.cpuMs()
                  const clientBefore = process.cpuUsage()
                  const outcome = await runConcurrently(CONCURRENCY, accounts.length, (_, i) =>
                    signIn(service.baseUrl, accounts[i]!)
                  )
                  const signedIn = outcome.latencies.length
                  const client = process.cpuUsage(clientBefore)
                  if (outcome.failures > 0) ctx.progress(`  sign-in failures: ${outcome.failureSamples.join(" | ")}`)
                  return {
                    perSecond: (signedIn * 1000) / outcome.wallMs,
                    cpuMs: (service.cpuMs() - cpuBefore) / signedIn,
                    failures: outcome.failures,
                    clientCpuMs: (client.user + client.system) / 1000 / signedIn
                  }
                })
              : yield* runPeer<{ recoveries: number; ms: number; cpuMs: number }>(ctx, "recoverRate", {
                  SECONDS: String(ctx.sizes.recoverSeconds),
                  WARM_SECONDS: String(ctx.sizes.warmSeconds)
                }).pipe(
                  Effect.map((r) => ({
                    perSecond: (r.recoveries * 1000) / r.ms,
                    cpuMs: r.cpuMs / r.recoveries,
                    failures: 0
                  }))
                )
          runs[side].push(run)
          ctx.progress(
            `[signin] round ${round + 1}/${ctx.sizes.rounds} ${side}: ${run.perSecond.toFixed(0)}/s, ` +
              `CPU ${run.cpuMs.toFixed(2)} ms each` +
              (run.clientCpuMs === undefined ? "" : ` (the load generator: ${run.clientCpuMs.toFixed(2)} ms each)`) +
              `, ${run.failures} failed`
          )
        }
      }
      const errors = [runs.service, runs.recover].map((list) => list.reduce((sum, run) => sum + run.failures, 0)) as [
        number,
        number
      ]
      const reference = "recoverMessageAddress in one process, one after another"
      const rows: ReadonlyArray<RatioRow> = [
        {
          measure: `sign-in (challenge + sign + verify), concurrency ${CONCURRENCY}: sign-ins/s vs recoveries/s`,
          better: "higher",
          reference,
          service: runs.service.map((run) => run.perSecond),
          peer: runs.recover.map((run) => run.perSecond),
          errors
        },
        {
          measure: "sign-in: server CPU per sign-in vs CPU per recovery, ms",
          better: "lower",
          reference,
          service: runs.service.map((run) => run.cpuMs),
          peer: runs.recover.map((run) => run.cpuMs),
          errors
        }
      ]
      return { ratios: rows, counts: [] }
    })
}
