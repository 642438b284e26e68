/**
 * An outage of the database, as the log shows it: every request on it is a 503, but the log holds
 * one WARN line for the outage (no line and no stack trace per refused request), and the service
 * serves again once the database is back. (Background ticks: test/reliability/Dependencies.test.ts.)
 */
import { expect, layer } from "@effect/vitest"
import { Effect, Layer, Logger, Ref } from "effect"
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { send } from "../support/http.js"
import { DatabaseProxy, ProxiedTestDatabase } from "../support/TestDatabase.js"
import { testServer } from "../support/TestServer.js"
import { eventually } from "../support/wait.js"

interface Line {
  readonly level: string
  readonly message: string
  readonly withCause: boolean
}

/** Every log line of the app at INFO and above, as it was written. */
class CapturedLogs extends Effect.Service<CapturedLogs>()("test/CapturedLogs", {
  effect: Effect.map(Ref.make<ReadonlyArray<Line>>([]), (lines) => ({
    lines: Ref.get(lines),
    logger: Logger.make<unknown, void>(({ logLevel, message, cause }) => {
      const text = Array.isArray(message) ? message.join(" ") : String(message)
      Effect.runSync(
        Ref.update(lines, (all) => [
          ...all,
          { level: logLevel.label, message: text, withCause: cause._tag !== "Empty" }
        ])
      )
    })
  }))
}) {}

const capturing = Layer.unwrapEffect(Effect.map(CapturedLogs, (logs) => Logger.add(logs.logger))).pipe(
  Layer.provideMerge(CapturedLogs.Default)
)

const server = testServer(
  {
    MERCHANT_PAY_TO: privateKeyToAccount(generatePrivateKey()).address,
    // the outage's closing line is an INFO one
    LOG_LEVEL: "Info"
  },
  { chain: InMemoryChain.layer() },
  ProxiedTestDatabase
).pipe(Layer.provideMerge(capturing))

layer(server, { excludeTestServices: true })("an outage in the log", (it) => {
  it.effect("30 requests refused while the database is cut: one WARN line, no stack trace, then served again", () =>
    Effect.gen(function* () {
      const logs = yield* CapturedLogs
      const created = yield* send("POST", "/merchant/orders", { json: { amount: "1", description: "before" } })
      expect(created.status).toBe(200)
      // A machine loaded enough to time out a background statement starts an outage of its own: the
      // cut below must begin a new one, so any earlier one is awaited to its end first.
      const open = yield* eventually("no database outage to be open", logs.lines, (lines) => {
        const started = lines.filter((line) => line.message.startsWith("database unavailable:")).length
        return started === lines.filter((line) => line.message.startsWith("database available again")).length
      })
      const before = open.length
      const proxy = yield* DatabaseProxy
      proxy.setMode("refuse")
      const answers = yield* Effect.forEach(
        Array.from({ length: 30 }, (_, i) =>
          i % 2 === 0
            ? send("GET", `/merchant/orders/${created.body.id}`)
            : send("POST", "/merchant/orders", { json: { amount: "1", description: "during" } })
        ),
        (request) => request,
        { concurrency: 5 }
      )
      proxy.setMode("forward")
      expect(answers.map((answer) => `${answer.status} ${answer.body.code}`)).toEqual(
        Array.from({ length: 30 }, () => "503 DATABASE_UNAVAILABLE")
      )
      const during = (yield* logs.lines).slice(before).filter((line) => line.level !== "INFO")
      expect(during.filter((line) => line.withCause)).toEqual([])
      expect(during.map((line) => `${line.level} ${line.message.split(":")[0]}`)).toEqual(["WARN database unavailable"])
      const served = yield* eventually(
        "the order to be served again",
        send("GET", `/merchant/orders/${created.body.id}`),
        (response) => response.status === 200
      )
      expect(served.body.id).toBe(created.body.id)
    })
  )
})
