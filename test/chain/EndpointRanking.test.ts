import { describe, expect, it } from "@effect/vitest"
import { Effect, Either, FastCheck } from "effect"
import { parseRpcUrls } from "../../src/chain/Deployment.js"
import { type EndpointHealth, rankEndpoints } from "../../src/chain/EndpointRanking.js"
import { checkEndpointChains } from "../../src/chain/StartupCheck.js"

const probe = FastCheck.record({ answered: FastCheck.boolean(), ms: FastCheck.integer({ min: 0, max: 5_000 }) })
const endpoint: FastCheck.Arbitrary<EndpointHealth> = FastCheck.record({
  status: FastCheck.constantFrom("up", "down", "unchecked", "wrong-chain"),
  probes: FastCheck.array(probe, { maxLength: 10 }),
  degraded: FastCheck.boolean()
})
const endpoints = FastCheck.array(endpoint, { minLength: 1, maxLength: 6 })

describe("endpoint ranking", () => {
  it.prop(
    "every endpoint up or down is tried once, those up first; unchecked ones or on another chain never",
    [endpoints],
    ([all]) => {
      const order = rankEndpoints(all)
      const usable = all.flatMap((e, i) => (e.status === "up" || e.status === "down" ? [i] : []))
      expect([...order].sort((a, b) => a - b)).toEqual(usable)
      const statuses = order.map((i) => all[i]!.status)
      expect(statuses).toEqual([...statuses].sort((a, b) => (a === b ? 0 : a === "up" ? -1 : 1)))
      // The down ones in configured order.
      const down = order.filter((i) => all[i]!.status === "down")
      expect(down).toEqual([...down].sort((a, b) => a - b))
    }
  )

  it.prop(
    "of two endpoints up, one that answered every probe faster than the other's answers comes first",
    [FastCheck.integer({ min: 1, max: 1_000 }), FastCheck.integer({ min: 1, max: 1_000 }), FastCheck.boolean()],
    ([fast, extra, fastFirst]) => {
      const quick: EndpointHealth = {
        status: "up",
        probes: Array(5).fill({ answered: true, ms: fast }),
        degraded: false
      }
      const slow: EndpointHealth = {
        status: "up",
        probes: [...Array(4).fill({ answered: true, ms: fast + extra }), { answered: false, ms: 2_000 }],
        degraded: false
      }
      const order = rankEndpoints(fastFirst ? [quick, slow] : [slow, quick])
      expect(order).toEqual(fastFirst ? [0, 1] : [1, 0])
    }
  )

  it("endpoints alike keep their configured order", () => {
    const alike: EndpointHealth = { status: "up", probes: [{ answered: true, ms: 3 }], degraded: false }
    expect(rankEndpoints([alike, alike, alike])).toEqual([0, 1, 2])
    expect(rankEndpoints([{ status: "up", probes: [], degraded: false }])).toEqual([0])
  })

  it.prop(
    "a degraded endpoint in use is tried after every other in use, before those down, whatever its probes",
    [endpoints],
    ([all]) => {
      const order = rankEndpoints(all)
      const rank = (i: number) => {
        const e = all[i]!
        return e.status === "down" ? 2 : e.degraded ? 1 : 0
      }
      const ranks = order.map(rank)
      expect(ranks).toEqual([...ranks].sort((a, b) => a - b))
    }
  )
})

describe("CHAIN_RPC_URL and CHAIN_RPC_URLS", () => {
  const parsed = (settings: ReadonlyArray<readonly [string, string]>) =>
    parseRpcUrls(settings.map(([name, text]) => ({ name, text })))

  it("are one URL, or several separated by commas, CHAIN_RPC_URL's first, each once", () => {
    expect(parsed([])).toEqual(Either.right([]))
    expect(parsed([["CHAIN_RPC_URL", "https://a.example/v2/key"]])).toEqual(Either.right(["https://a.example/v2/key"]))
    expect(
      parsed([
        ["CHAIN_RPC_URL", " https://a.example/v2/key , http://127.0.0.1:8545"],
        ["CHAIN_RPC_URLS", "https://b.example,https://a.example/v2/key"]
      ])
    ).toEqual(Either.right(["https://a.example/v2/key", "http://127.0.0.1:8545", "https://b.example"]))
  })

  it("refuse an entry that is not an http(s) URL, naming its position and never the text (it may hold a key)", () => {
    for (const text of ["https://a.example/v2/secret-key,wss://b.example/secret-key", "secret-key", " , "]) {
      const refused = parsed([["CHAIN_RPC_URL", text]])
      expect(Either.isLeft(refused)).toBe(true)
      const message = String(Either.isLeft(refused) ? refused.left : "")
      expect(message).toContain("Expected CHAIN_RPC_URL to be http(s) URLs separated by commas")
      expect(message).not.toContain("secret-key")
    }
    expect(parsed([["CHAIN_RPC_URLS", "https://a.example,"]])).toEqual(Either.right(["https://a.example"]))
  })
})

describe("each endpoint's chain id at start", () => {
  const answered = (chainId: number) => ({ _tag: "Answered", chainId }) as const
  const unanswered = (error: string) => ({ _tag: "Unanswered", error }) as const
  const refusal = (endpoints: Parameters<typeof checkEndpointChains>[1]) =>
    Effect.runSync(Effect.flip(checkEndpointChains(31337, endpoints))).message

  it("one endpoint that does not answer, or none of several, ends the start naming each by position", () => {
    expect(refusal([{ host: "a.example", answer: unanswered("connect ECONNREFUSED") }])).toBe(
      "CHAIN_RPC_URL did not answer at start: connect ECONNREFUSED"
    )
    expect(
      refusal([
        { host: "a.example", answer: unanswered("timed out") },
        { host: "b.example", answer: unanswered("HTTP 401") }
      ])
    ).toBe("no endpoint of CHAIN_RPC_URL answered at start: 1: timed out; 2: HTTP 401")
  })

  it("one of several may be silent at start (checked once it answers); one on another chain may not", () => {
    expect(
      Effect.runSync(
        Effect.either(
          checkEndpointChains(31337, [
            { host: "a.example", answer: unanswered("timed out") },
            { host: "b.example", answer: answered(31337) }
          ])
        )
      )._tag
    ).toBe("Right")
    expect(
      refusal([
        { host: "a.example", answer: answered(31337) },
        { host: "b.example", answer: answered(56) }
      ])
    ).toBe(
      "CHAIN_RPC_URL endpoint 2 (b.example) is on chain 56, not CHAIN_ID 31337: point it at a node of that chain, or remove it"
    )
  })
})
