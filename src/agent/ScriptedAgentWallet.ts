/**
 * An agent wallet for tests: failures on demand, per card or for every card, with each of the
 * port's error codes, and hangs. On its own (`layer()`) it holds what the test sets and its writes
 * only move those holdings (signed, then `record`, then "broadcast", like a real wallet's); around
 * a real wallet (`around(ChainAgentWallet)`) it passes every call not scripted to fail through.
 *
 *     layer(testServer({ AGENT_MODE: "dry" }, { agentWallet: ScriptedAgentWallet.layer() }))(...)
 */
import { randomBytes } from "node:crypto"
import { Context, Effect, Layer, Option, Ref } from "effect"
import { getAddress, keccak256, toHex } from "viem"
import type { Address } from "../chain/Address.js"
import type { RecordSigned, SignedTransaction } from "../chain/ChainClient.js"
import {
  type AgentCard,
  AgentWallet,
  AgentWalletError,
  type AgentWalletErrorCode,
  type AgentWalletShape,
  type WalletHoldings,
  type WalletSession
} from "./AgentWallet.js"

export interface ScriptedAgentWalletShape {
  /** Sets what a card's wallet holds. */
  readonly setHoldings: (cardId: string, holdings: WalletHoldings) => Effect.Effect<void>
  /** Makes every call for this card (or, with "*", for every card) fail with the code; none clears it. */
  readonly failWith: (cardId: string, code: Option.Option<AgentWalletErrorCode>) => Effect.Effect<void>
  /** Makes every call for this card (or "*") hang until cleared. */
  readonly hang: (cardId: string, hanging: boolean) => Effect.Effect<void>
  readonly setSession: (session: WalletSession) => Effect.Effect<void>
  /** The wallets funded so far. */
  readonly funded: Effect.Effect<ReadonlyArray<string>>
  /** Every write, oldest first. */
  readonly writes: Effect.Effect<
    ReadonlyArray<{ readonly cardId: string; readonly kind: string; readonly amount: bigint }>
  >
}

interface State {
  readonly holdings: ReadonlyMap<string, WalletHoldings>
  readonly failures: ReadonlyMap<string, AgentWalletErrorCode>
  readonly hanging: ReadonlySet<string>
  readonly session: WalletSession
  readonly funded: ReadonlyArray<string>
  readonly writes: ReadonlyArray<{ readonly cardId: string; readonly kind: string; readonly amount: bigint }>
}

const EMPTY: WalletHoldings = { usd1: 0n, tokens: new Map() }

export class ScriptedAgentWallet extends Context.Tag("app/ScriptedAgentWallet")<
  ScriptedAgentWallet,
  ScriptedAgentWalletShape
>() {
  /** The wallet (as `AgentWallet`) and its script: empty wallets, a connected session, no failure. */
  static readonly layer = () => Layer.effectContext(make(Option.none()))

  /** The given wallet with failures on demand: whatever is not scripted to fail goes through to it. */
  static readonly around = <E, R>(inner: Layer.Layer<AgentWallet, E, R>) =>
    Layer.effectContext(Effect.flatMap(AgentWallet, (wallet) => make(Option.some(wallet)))).pipe(Layer.provide(inner))
}

const make = (inner: Option.Option<AgentWalletShape>) =>
  Effect.gen(function* () {
    const state = yield* Ref.make<State>({
      holdings: new Map(),
      failures: new Map(),
      hanging: new Set(),
      session: { connected: true },
      funded: [],
      writes: []
    })

    /** Fails or hangs as scripted for this card (or for every card). */
    const gate = (cardId: string) =>
      Effect.gen(function* () {
        const current = yield* Ref.get(state)
        if (current.hanging.has(cardId) || current.hanging.has("*")) return yield* Effect.never
        const code = current.failures.get(cardId) ?? current.failures.get("*")
        if (code !== undefined) {
          return yield* new AgentWalletError({ code, message: `the agent wallet failed (scripted ${code})` })
        }
      })

    const holdingsOf = (current: State, cardId: string) => current.holdings.get(cardId) ?? EMPTY

    const write = <E, R>(
      card: AgentCard,
      kind: string,
      amount: bigint,
      move: (holdings: WalletHoldings) => WalletHoldings,
      record: RecordSigned<E, R>
    ) =>
      Effect.gen(function* () {
        yield* gate(card.id)
        const raw = toHex(randomBytes(32))
        const signed: SignedTransaction = { sender: card.wallet ?? card.address, hash: keccak256(raw), raw, nonce: 0 }
        yield* record(signed, "write")
        yield* Ref.update(state, (current) => ({
          ...current,
          holdings: new Map(current.holdings).set(card.id, move(holdingsOf(current, card.id))),
          writes: [...current.writes, { cardId: card.id, kind, amount }]
        }))
        return signed
      })

    const wallet = AgentWallet.of({
      address: (card) =>
        Effect.as(
          gate(card.id),
          getAddress(`0x${keccak256(toHex(`scripted-wallet:${card.id}`)).slice(26)}`) as Address
        ),
      holdings: (cards) =>
        Effect.forEach(cards, (card) => gate(card.id)).pipe(
          Effect.zipRight(Ref.get(state)),
          Effect.map((current) => cards.map((card) => holdingsOf(current, card.id)))
        ),
      sell: (card, token, amount, _minUsd1Out, record) =>
        write(
          card,
          `sell ${token.symbol}`,
          amount,
          (holdings) => ({
            ...holdings,
            tokens: new Map(holdings.tokens).set(token.address, (holdings.tokens.get(token.address) ?? 0n) - amount)
          }),
          record
        ),
      buy: (card, token, usd1In, _minTokensOut, record) =>
        write(
          card,
          `buy ${token.symbol}`,
          usd1In,
          (holdings) => ({ ...holdings, usd1: holdings.usd1 - usd1In }),
          record
        ),
      sendUsd1: (card, amount, record) =>
        write(card, "send", amount, (holdings) => ({ ...holdings, usd1: holdings.usd1 - amount }), record),
      repayUsd1: (card, _to, amount, record) =>
        write(card, "repay", amount, (holdings) => ({ ...holdings, usd1: holdings.usd1 - amount }), record),
      session: Effect.flatMap(gate("*"), () => Effect.map(Ref.get(state), (current) => current.session)),
      fund: (card) =>
        Effect.zipRight(
          gate(card.id),
          Ref.update(state, (current) => ({ ...current, funded: [...current.funded, card.id] }))
        )
    })

    const control = ScriptedAgentWallet.of({
      setHoldings: (cardId, holdings) =>
        Ref.update(state, (current) => ({ ...current, holdings: new Map(current.holdings).set(cardId, holdings) })),
      failWith: (cardId, code) =>
        Ref.update(state, (current) => {
          const failures = new Map(current.failures)
          if (Option.isSome(code)) failures.set(cardId, code.value)
          else failures.delete(cardId)
          return { ...current, failures }
        }),
      hang: (cardId, hanging) =>
        Ref.update(state, (current) => {
          const next = new Set(current.hanging)
          if (hanging) next.add(cardId)
          else next.delete(cardId)
          return { ...current, hanging: next }
        }),
      setSession: (session) => Ref.update(state, (current) => ({ ...current, session })),
      funded: Effect.map(Ref.get(state), (current) => current.funded),
      writes: Effect.map(Ref.get(state), (current) => current.writes)
    })
    return Context.make(
      AgentWallet,
      Option.getOrElse(Option.map(inner, passThrough(gate)), () => wallet)
    ).pipe(Context.add(ScriptedAgentWallet, control))
  })

/** Every call of `inner`, after the script's failures and hangs for its card. */
const passThrough =
  (gate: (cardId: string) => Effect.Effect<void, AgentWalletError>) =>
  (inner: AgentWalletShape): AgentWalletShape => ({
    address: (card) => Effect.zipRight(gate(card.id), inner.address(card)),
    holdings: (cards) =>
      Effect.forEach(cards, (card) => gate(card.id), { discard: true }).pipe(Effect.zipRight(inner.holdings(cards))),
    sell: (card, token, amount, minUsd1Out, record) =>
      Effect.zipRight(gate(card.id), inner.sell(card, token, amount, minUsd1Out, record)),
    buy: (card, token, usd1In, minTokensOut, record) =>
      Effect.zipRight(gate(card.id), inner.buy(card, token, usd1In, minTokensOut, record)),
    sendUsd1: (card, amount, record) => Effect.zipRight(gate(card.id), inner.sendUsd1(card, amount, record)),
    repayUsd1: (card, to, amount, record) => Effect.zipRight(gate(card.id), inner.repayUsd1(card, to, amount, record)),
    session: Effect.zipRight(gate("*"), inner.session),
    fund: (card) => Effect.zipRight(gate(card.id), inner.fund(card))
  })
