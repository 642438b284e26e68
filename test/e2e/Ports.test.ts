/**
 * The whole HTTP app on replaced ports: the in-memory chain, the scripted identity provider and a
 * fixed card issuer, provided from outside with one Layer each. No anvil and no provider server
 * run; a card app's journey still works over real HTTP, down to a payment by the standard x402
 * client and the statement.
 */
import { readdirSync, readFileSync } from "node:fs"
import { HttpServer } from "@effect/platform"
import { SqlClient } from "@effect/sql"
import { expect, layer } from "@effect/vitest"
import { registerExactEvmScheme } from "@x402/evm/exact/client"
import { decodePaymentResponseHeader, wrapFetchWithPayment, x402Client } from "@x402/fetch"
import { Effect } from "effect"
import { parseUnits } from "viem"
import { FixedCardIssuer } from "../../src/cards/CardIssuer.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { ScriptedKycProvider, ScriptedOutcome } from "../../src/kyc/ScriptedKycProvider.js"
import { newAccount } from "../support/auth.js"
import { signInWithClient } from "../support/client.js"
import { send } from "../support/http.js"
import { testServer } from "../support/TestServer.js"
import { expectWorth } from "../support/x402.js"

const merchant = newAccount()
const CARD = { number: "9406123456789012", cvv: "321", expiry: "11/29" }

/** Processes whose parent is this test process and whose command is `name`. */
const childrenNamed = (name: string) =>
  readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .flatMap((pid) => {
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
        const [, command = "", rest = ""] = /^\d+ \((.*)\) (.*)$/.exec(stat) ?? []
        return Number(rest.split(" ")[1]) === process.pid && command === name ? [pid] : []
      } catch {
        return []
      }
    })

const server = testServer(
  { MERCHANT_PAY_TO: merchant.address },
  {
    chain: InMemoryChain.layer(),
    kycProvider: ScriptedKycProvider.layer(),
    cardIssuer: FixedCardIssuer([CARD])
  }
)

layer(server, { excludeTestServices: true })("the whole app on in-memory and scripted ports", (it) => {
  it.effect("sign-in, identity check, card, order, x402 payment and statement, with no anvil", () =>
    Effect.gen(function* () {
      const chain = yield* InMemoryChain
      const kyc = yield* ScriptedKycProvider
      const { account, result, client } = yield* signInWithClient()
      expect(result).toMatchObject({ address: account.address, kyc: "none", card: null })

      // The identity check: the scripted provider approves with a name and a document.
      yield* kyc.script(
        account.address,
        ScriptedOutcome.Approve({ fullName: "Ada  Lovelace", documentNumber: "AL-1815-12-10" })
      )
      const session = yield* client.kyc.startSession({ payload: {} })
      expect(session.url).toMatch(/^https:\/\/scripted-kyc\.invalid\/sessions\//)
      const me = yield* client.account.me()
      expect(me).toMatchObject({
        kyc: "approved",
        card: { address: account.address, holder: "Ada Lovelace", ...CARD }
      })

      // An order paid by the card key through the standard x402 client, settled in memory.
      yield* chain.mint(chain.usd1.address, account.address, parseUnits("20", 18))
      const order = yield* client.merchant.createOrder({ payload: { amount: "3.25", description: "Tea" } })
      const x402 = new x402Client()
      registerExactEvmScheme(x402, { signer: account })
      x402.setSpendControls({
        allowedAssets: [
          { network: "eip155:31337", asset: chain.usd1.address, maxAmountPerPayment: "10000000000000000000" }
        ]
      })
      const address = (yield* HttpServer.HttpServer).address
      const url = `http://127.0.0.1:${address._tag === "TcpAddress" ? address.port : 0}/merchant/orders/${order.id}/pay`
      const paid = yield* Effect.promise(() => wrapFetchWithPayment(fetch, x402)(url))
      expect(paid.status).toBe(200)
      const receipt = decodePaymentResponseHeader(paid.headers.get("PAYMENT-RESPONSE")!)
      expect(receipt).toMatchObject({ success: true, network: "eip155:31337", payer: account.address })
      const charged = yield* chain.balanceOf(chain.usd1.address, merchant.address)
      expectWorth(charged, "3.25")
      expect(yield* chain.balanceOf(chain.usd1.address, account.address)).toBe(parseUnits("20", 18) - charged)

      const statement = yield* client.statement.activity({ urlParams: {} })
      expect(statement).toEqual([
        expect.objectContaining({ type: "payment", usd: 3.25, description: "Tea", tx: receipt.transaction })
      ])

      // The replaced ports were the ones used, and nothing was started for the chain.
      const sql = yield* SqlClient.SqlClient
      const providers = yield* sql<{ provider: string }>`SELECT DISTINCT provider FROM kyc_sessions`.pipe(Effect.orDie)
      expect(providers).toEqual([{ provider: "scripted" }])
      const issuers = yield* sql<{ issuer: string }>`SELECT issuer FROM cards`.pipe(Effect.orDie)
      expect(issuers).toEqual([{ issuer: "fixed" }])
      expect(childrenNamed("anvil")).toEqual([])
      // The sandbox's hosted page is off when the sandbox is not the provider in force.
      expect((yield* send("GET", "/kyc/sandbox/AAAAAAAAAAAAAAAAAAAAAA")).status).toBe(404)
    })
  )
})
