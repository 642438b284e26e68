/**
 * The start-up checks of a configured chain, on the real service against a devnet: a node on
 * another chain than CHAIN_ID, or a USD1_ADDRESS that is not an EIP-3009 token (an account without
 * code, a contract of another kind), ends the start with exit 1 and one fatal line naming the
 * setting, before anything is served.
 */
import { describe, expect, it } from "@effect/vitest"
import { Effect } from "effect"
import { startAnvil } from "../../src/chain/Anvil.js"
import { startDevnet } from "../../src/chain/Devnet.js"
import { devnetServiceEnv, logLines, spawnService } from "../support/process.js"
import { temporaryDatabaseUrl } from "../support/TestDatabase.js"

/** Starts the service with `extra` settings over a devnet; answers its exit code and its fatal lines. */
const failedStart = (
  extra: (devnet: Effect.Effect.Success<ReturnType<typeof startDevnet>>) => Record<string, string>
) =>
  Effect.gen(function* () {
    const devnet = yield* startDevnet().pipe(Effect.orDie)
    const env = yield* devnetServiceEnv(devnet, yield* temporaryDatabaseUrl, { LOG_LEVEL: "Info", ...extra(devnet) })
    const service = yield* spawnService(env)
    const code = yield* service.exited
    const lines = logLines(service.output())
    return { code, fatal: lines.filter((line) => line.logLevel === "FATAL"), devnet, lines }
  })

describe("start-up checks of the chain", () => {
  it.scopedLive("a node on another chain than CHAIN_ID: exit 1, one fatal line, nothing served", () =>
    Effect.gen(function* () {
      const { code, fatal, lines } = yield* failedStart(() => ({ CHAIN_ID: "8453" }))
      expect(code).toBe(1)
      expect(fatal).toHaveLength(1)
      expect(fatal[0]).toMatchObject({
        message:
          "start failed: CHAIN_RPC_URL is on chain 31337, not CHAIN_ID 8453: point it at a node of that chain, " +
          "or set CHAIN_ID to the chain it serves",
        annotations: { error: "ChainMisconfigured" }
      })
      expect(lines.some((line) => String(line.message).includes(" listening on "))).toBe(false)
    })
  )

  it.scopedLive("one of two endpoints on another chain: exit 1, one fatal line naming it by position and host", () =>
    Effect.gen(function* () {
      const other = yield* startAnvil({ chainId: 8453 }).pipe(Effect.orDie)
      // Credentials in the URL stand for a provider's API key: never in a line.
      const keyed = other.replace("http://", "http://user:api-key@")
      const { code, fatal } = yield* failedStart((devnet) => ({ CHAIN_RPC_URL: `${devnet.rpcUrl},${keyed}` }))
      expect(code).toBe(1)
      expect(fatal).toHaveLength(1)
      expect(fatal[0]).toMatchObject({
        message:
          `start failed: CHAIN_RPC_URL endpoint 2 (${new URL(other).host}) is on chain 8453, not CHAIN_ID 31337: ` +
          "point it at a node of that chain, or remove it",
        annotations: { error: "ChainMisconfigured" }
      })
      expect(JSON.stringify(fatal)).not.toContain("api-key")
    })
  )

  it.scopedLive(
    "a USD1_ADDRESS without code, or of a contract that is not an EIP-3009 token: exit 1, one fatal line",
    () =>
      Effect.gen(function* () {
        const eoa = "0x70997970C51812dc3A010C7d01b50e0d17dc79C8"
        const account = yield* failedStart(() => ({ USD1_ADDRESS: eoa }))
        expect(account.code).toBe(1)
        expect(account.fatal).toHaveLength(1)
        expect(account.fatal[0]!.message).toBe(
          `start failed: USD1_ADDRESS ${eoa} is not an EIP-3009 token on chain 31337: name() answers nothing, ` +
            "version() answers nothing, DOMAIN_SEPARATOR() answers nothing, " +
            "authorizationState(address,bytes32) answers nothing"
        )

        // The demo exchange has code, but none of those functions.
        const contract = yield* failedStart((devnet) => ({ USD1_ADDRESS: devnet.exchange }))
        expect(contract.code).toBe(1)
        expect(contract.fatal).toHaveLength(1)
        expect(contract.fatal[0]!.message).toBe(
          `start failed: USD1_ADDRESS ${contract.devnet.exchange} is not an EIP-3009 token on chain 31337: ` +
            "name() reverts, version() reverts, DOMAIN_SEPARATOR() reverts, authorizationState(address,bytes32) reverts"
        )
      })
  )
})
