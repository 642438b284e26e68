/**
 * The identity check told by the event stream: sign-in, stream, approval in the sandbox, and the
 * `kyc` event with the card arrives without any GET /me.
 */
import { expect, layer } from "@effect/vitest"
import { Effect } from "effect"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { approve, kycEnv, openSandboxSession, signIn } from "../kyc/helpers.js"
import { readEvents } from "../support/events.js"
import { testServer } from "../support/TestServer.js"

layer(testServer(kycEnv(), { chain: InMemoryChain.layer() }), { excludeTestServices: true })(
  "the identity check on the event stream",
  (it) => {
    it.scoped("sign-in, stream, sandbox approval: a kyc event with the card, no GET /me", () =>
      Effect.gen(function* () {
        const { account, token } = yield* signIn()
        const events = yield* readEvents({ token })
        const ready = yield* events.await("ready", (event) => event.event === "ready")
        expect(ready).toEqual({ event: "ready", id: 0, data: { kyc: "none", cardUsd1: null, lastEventId: 0 } })

        const sessionId = yield* openSandboxSession(token)
        const pending = yield* events.await("kyc pending", (event) => event.event === "kyc")
        expect(pending).toEqual({ event: "kyc", id: 1, data: { kyc: "pending", card: null } })

        expect((yield* approve(sessionId, "Ada Lovelace", "AL-1815")).status).toBe(303)
        const approved = yield* events.await("kyc approved", (e) => e.event === "kyc" && e.data.kyc === "approved")
        expect(approved.event === "kyc" && approved.id).toBe(2)
        if (approved.event !== "kyc") return
        expect(approved.data.card).toMatchObject({ address: account.address, holder: "Ada Lovelace" })
        expect(approved.data.card?.number).toMatch(/^9406\d{12}$/)
        yield* events.stop
      })
    )
  }
)
