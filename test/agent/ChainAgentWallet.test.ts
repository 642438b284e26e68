/**
 * The default agent wallet: one on-chain account per card, keys derived from AGENT_WALLET_SEED,
 * funded by the chain's faucet, trading on the chain's exchange. On the real devnet, plus what the
 * in-memory chain makes cheap (a paused token, a chain without a faucet, the seed file).
 */
import { randomUUID } from "node:crypto"
import { mkdtempSync, readFileSync, rmSync, statSync } from "node:fs"
import { tmpdir } from "node:os"
import path from "node:path"
import { expect, it, layer } from "@effect/vitest"
import { ConfigProvider, Effect, Layer, Logger, Option, Redacted, Ref } from "effect"
import { getAddress, parseUnits, toHex } from "viem"
import { type AgentCard, AgentWallet, AgentWalletError } from "../../src/agent/AgentWallet.js"
import { AGENT_WALLET_SEED, agentWalletKey, ChainAgentWallet } from "../../src/agent/ChainAgentWallet.js"
import type { SignedTransaction } from "../../src/chain/ChainClient.js"
import { ChainClient } from "../../src/chain/ChainClient.js"
import { usd1ForTokens } from "../../src/chain/Exchange.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"
import { TokenRegistry } from "../../src/chain/Tokens.js"
import { AppConfig } from "../../src/runtime/Config.js"
import { Secrets } from "../../src/runtime/Secrets.js"
import { TestChain } from "../support/TestChain.js"

const units = (amount: string) => parseUnits(amount, 18)

const newCard = (): AgentCard => ({
  id: randomUUID(),
  address: getAddress(toHex(crypto.getRandomValues(new Uint8Array(20))))
})

const noRecord = () => Effect.void

/** The wallet's holdings valued at the feed prices, USD1 atomic units, per registry token. */
const valued = (card: AgentCard) =>
  Effect.gen(function* () {
    const wallet = yield* AgentWallet
    const chain = yield* ChainClient
    const registry = yield* TokenRegistry
    const [holdings] = yield* wallet.holdings([card])
    const values = yield* Effect.forEach(registry.tokens, (token) =>
      Effect.map(chain.feedRound(token.feed), (round) =>
        usd1ForTokens(holdings!.tokens.get(token.address)!, round.answer)
      )
    )
    return { usd1: holdings!.usd1, values }
  })

/** The wallet over the given chain, with in-memory secrets; the chain's own services stay visible. */
const onChain = <ROut>(chain: Layer.Layer<ROut>) =>
  ChainAgentWallet.pipe(Layer.provideMerge(Layer.merge(chain, Secrets.ephemeral)))

layer(onChain(TestChain), { excludeTestServices: true, timeout: "60 seconds" })(
  "ChainAgentWallet on the devnet",
  (it) => {
    it.effect("each card has its own wallet, always the same one", () =>
      Effect.gen(function* () {
        const wallet = yield* AgentWallet
        const cards = Array.from({ length: 20 }, newCard)
        const addresses = yield* Effect.forEach(cards, wallet.address)
        expect(new Set(addresses).size).toBe(20)
        expect(addresses.some((address, i) => address === cards[i]!.address)).toBe(false)
        // the address depends on the card id only
        expect(yield* wallet.address({ ...cards[3]!, address: newCard().address })).toBe(addresses[3])
        expect(yield* wallet.session).toEqual({ connected: true })
      })
    )

    it.effect("fund gives $25 of USD1 and $1,000 of stock tokens split evenly at the feed prices", () =>
      Effect.gen(function* () {
        const wallet = yield* AgentWallet
        const card = newCard()
        yield* wallet.fund(card)
        const { usd1, values } = yield* valued(card)
        expect(usd1).toBe(units("25"))
        expect(values).toHaveLength(5)
        // $200 each, short of it by the rounding of one token unit at most
        for (const value of values) {
          expect(value).toBeLessThanOrEqual(units("200"))
          expect(units("200") - value).toBeLessThan(10n ** 6n)
        }
      })
    )

    it.effect("holdings are the wallets' balances of USD1 and every registry token, in the order asked", () =>
      Effect.gen(function* () {
        const wallet = yield* AgentWallet
        const chain = yield* ChainClient
        const registry = yield* TokenRegistry
        const [funded, empty] = [newCard(), newCard()]
        yield* wallet.fund(funded)
        const addresses = yield* Effect.forEach([empty, funded], wallet.address)
        const balances = yield* chain.balances(addresses, [
          chain.usd1.address,
          ...registry.tokens.map((token) => token.address)
        ])
        const holdings = yield* wallet.holdings([empty, funded])
        expect(holdings.map((h) => [h.usd1, ...registry.tokens.map((token) => h.tokens.get(token.address))])).toEqual(
          balances
        )
        expect(holdings[0]!.usd1).toBe(0n)
        expect(holdings[1]!.usd1).toBe(units("25"))
        expect([...holdings[1]!.tokens.keys()]).toEqual(registry.tokens.map((token) => token.address))
      })
    )

    it.effect("sendUsd1 moves USD1 from the wallet to the card's own address, recorded first", () =>
      Effect.gen(function* () {
        const wallet = yield* AgentWallet
        const chain = yield* ChainClient
        const card = newCard()
        yield* wallet.fund(card)
        const recorded = yield* Ref.make<ReadonlyArray<SignedTransaction>>([])
        const signed = yield* wallet.sendUsd1(card, units("10.5"), (tx) => Ref.update(recorded, (all) => [...all, tx]))
        expect(yield* Ref.get(recorded)).toEqual([signed])
        const receipt = Option.getOrThrow(yield* chain.receipt(signed.hash, 10_000))
        expect(receipt.transfers).toEqual([
          { token: chain.usd1.address, from: yield* wallet.address(card), to: card.address, value: units("10.5") }
        ])
        expect(yield* chain.balanceOf(chain.usd1.address, card.address)).toBe(units("10.5"))
        expect((yield* wallet.holdings([card]))[0]!.usd1).toBe(units("14.5"))
      })
    )

    it.effect("sell and buy trade on the exchange; a refusal is AGENT_WALLET_ERROR with the chain's reason", () =>
      Effect.gen(function* () {
        const wallet = yield* AgentWallet
        const chain = yield* ChainClient
        const registry = yield* TokenRegistry
        const nvda = registry.tokens.find((token) => token.symbol === "NVDA")!
        const card = newCard()
        yield* wallet.fund(card)
        const before = (yield* wallet.holdings([card]))[0]!
        const held = before.tokens.get(nvda.address)!
        const refused = yield* Effect.flip(wallet.sell(card, nvda, held, units("1000000"), noRecord))
        expect(refused).toBeInstanceOf(AgentWalletError)
        expect(refused).toMatchObject({
          code: "AGENT_WALLET_ERROR",
          message: "selling NVDA was refused by the chain: DemoExchange: output below minimum"
        })
        const price = (yield* chain.feedRound(nvda.feed)).answer
        const sold = yield* wallet.sell(card, nvda, held, usd1ForTokens(held, price), noRecord)
        expect(Option.getOrThrow(yield* chain.receipt(sold.hash, 10_000)).status).toBe("success")
        const afterSale = (yield* wallet.holdings([card]))[0]!
        expect(afterSale.tokens.get(nvda.address)).toBe(0n)
        expect(afterSale.usd1).toBe(before.usd1 + usd1ForTokens(held, price))
        // $181 buys 1 NVDA back
        const bought = yield* wallet.buy(card, nvda, units("181"), units("1"), noRecord)
        expect(Option.getOrThrow(yield* chain.receipt(bought.hash, 10_000)).status).toBe("success")
        expect((yield* wallet.holdings([card]))[0]!.tokens.get(nvda.address)).toBe(units("1"))
        const tooMuch = yield* Effect.flip(wallet.sendUsd1(card, units("1000000"), noRecord))
        expect(tooMuch.message).toBe("sending USD1 to the card was refused by the chain: ERC20InsufficientBalance")
      })
    )
  }
)

layer(onChain(InMemoryChain.layer()), { excludeTestServices: true })("ChainAgentWallet in memory", (it) => {
  it.effect("fund splits the $1,000 over the tokens that are not paused", () =>
    Effect.gen(function* () {
      const wallet = yield* AgentWallet
      const chain = yield* InMemoryChain
      const card = newCard()
      yield* chain.setPaused("SPY", true)
      yield* wallet.fund(card).pipe(Effect.ensuring(chain.setPaused("SPY", false)))
      const { usd1, values } = yield* valued(card)
      expect(usd1).toBe(units("25"))
      const spy = chain.tokens.findIndex((token) => token.symbol === "SPY")
      expect(values[spy]).toBe(0n)
      for (const [i, value] of values.entries()) {
        if (i !== spy) expect(units("250") - value).toBeLessThan(10n ** 6n)
      }
    })
  )

  it.effect("no key and no seed reaches a log or an error", () =>
    Effect.gen(function* () {
      const wallet = yield* AgentWallet
      const registry = yield* TokenRegistry
      const seed = Redacted.value(yield* (yield* Secrets).secret(AGENT_WALLET_SEED))
      const card = newCard()
      const key = Redacted.value(agentWalletKey(Redacted.make(seed), card.id))
      const logs: Array<string> = []
      const capture = Logger.replace(
        Logger.defaultLogger,
        Logger.make(({ message, cause }) => {
          logs.push(JSON.stringify(message), String(cause))
        })
      )
      const failure = yield* Effect.gen(function* () {
        yield* wallet.fund(card)
        yield* Effect.logInfo("funded", card)
        return yield* Effect.flip(wallet.sell(card, registry.tokens[0]!, units("1"), units("1000000"), noRecord))
      }).pipe(Effect.provide(capture))
      yield* Effect.logError("sell refused", failure).pipe(Effect.provide(capture))
      const seen = [...logs, JSON.stringify(failure), String(failure), failure.message]
      for (const secret of [seed, key, key.slice(2)]) {
        expect(seen.some((text) => text.includes(secret))).toBe(false)
      }
    })
  )
})

it.effect("without a faucet, fund does nothing", () =>
  Effect.gen(function* () {
    const wallet = yield* AgentWallet
    const card = newCard()
    yield* wallet.fund(card)
    const [holdings] = yield* wallet.holdings([card])
    expect(holdings!.usd1).toBe(0n)
    expect([...holdings!.tokens.values()]).toEqual([0n, 0n, 0n, 0n, 0n])
  }).pipe(
    Effect.provide(
      onChain(
        Layer.merge(
          Layer.effect(
            ChainClient,
            Effect.map(ChainClient, (chain) => ({ ...chain, faucet: Option.none() }))
          ),
          Layer.effect(TokenRegistry, TokenRegistry)
        ).pipe(Layer.provide(InMemoryChain.layer()))
      )
    )
  )
)

it.effect(
  "AGENT_WALLET_SEED comes from a development file generated once (0600) and reused, else from the variable",
  () =>
    Effect.gen(function* () {
      const dir = yield* Effect.acquireRelease(
        Effect.sync(() => mkdtempSync(path.join(tmpdir(), "agent-wallet-seed-"))),
        (dir) => Effect.sync(() => rmSync(dir, { recursive: true, force: true }))
      )
      const card = newCard()
      const addressWith = (env: Record<string, string>) =>
        Effect.flatMap(AgentWallet, (wallet) => wallet.address(card)).pipe(
          Effect.provide(
            ChainAgentWallet.pipe(
              Layer.provide(Layer.merge(InMemoryChain.layer(), Secrets.layer.pipe(Layer.provide(AppConfig.layer))))
            )
          ),
          Effect.withConfigProvider(ConfigProvider.fromMap(new Map(Object.entries({ DATA_DIR: dir, ...env }))))
        )
      const first = yield* addressWith({})
      const file = path.join(dir, "agent-wallet.seed")
      const seed = readFileSync(file, "utf8")
      expect(statSync(file).mode & 0o777).toBe(0o600)
      expect(seed.trim()).toMatch(/^[0-9a-f]{64}$/)
      // a restart: the same seed, the same wallet
      expect(yield* addressWith({})).toBe(first)
      expect(readFileSync(file, "utf8")).toBe(seed)
      // the variable wins over the file
      expect(yield* addressWith({ AGENT_WALLET_SEED: "a production seed" })).not.toBe(first)
      expect(yield* addressWith({ AGENT_WALLET_SEED: seed.trim() })).toBe(first)
    }).pipe(Effect.scoped)
)
