/**
 * (d) sign-in: challenge + sign + verify over HTTP at concurrency 10, each with a fresh key,
 * against the rate at which one process recovers the signer of such a message
 * (`recoverMessageAddress`), the one unavoidable computation of a sign-in.
 */
import { Effect } from "effect"
import { generatePrivateKey, type PrivateKeyAccount } from "viem/accounts"
import { signingAccount } from "../src/chain/Secp256k1.js"
import { alternating, expectJson, postJson, type RatioRow, runConcurrently, runPeer, type Section } from "./harness.js"

const CONCURRENCY = 10

/**
 * A fresh wallet that signs in libsecp256k1, as the service's relayer does: the load generator shares
 * the two cores with the service, so its signatures should cost it as little as they can.
 */
const freshWallet = () => signingAccount(generatePrivateKey())

/** One sign-in; answers its bearer token. `plainFetch` lets the count benchmark see each request. */
export const signIn = async (
  baseUrl: string,
  account: PrivateKeyAccount = freshWallet(),
  plainFetch: typeof postJson = postJson
) => {
  const { message } = await expectJson<{ message: string }>(
    await plainFetch(`${baseUrl}/auth/challenge`, { address: account.address })
  )
  const signature = await account.signMessage({ message })
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
