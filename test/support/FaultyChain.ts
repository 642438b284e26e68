/**
 * The in-memory chain with faults a test switches on: `stall` makes every chain call wait until
 * `resume` (a node that stopped answering), and `afterRecord` runs an effect once a relayed
 * transaction is recorded, before it is "broadcast" (to break the database mid-settlement).
 */
import { Context, Effect, Layer, Ref } from "effect"
import { ChainClient, type ChainClientShape } from "../../src/chain/ChainClient.js"
import { InMemoryChain } from "../../src/chain/InMemoryChain.js"

export interface ChainFaultsShape {
  readonly stall: Effect.Effect<void>
  readonly resume: Effect.Effect<void>
  /** Runs `hook` after the next recorded transaction, then forgets it. */
  readonly afterRecord: (hook: Effect.Effect<void>) => Effect.Effect<void>
}

export class ChainFaults extends Context.Tag("test/ChainFaults")<ChainFaults, ChainFaultsShape>() {}

/** `InMemoryChain.layer()` whose `ChainClient` obeys `ChainFaults`; offers all three. */
export const FaultyChain = Layer.scopedContext(
  Effect.gen(function* () {
    const inner = yield* Layer.build(InMemoryChain.layer())
    const client = Context.get(inner, ChainClient)
    const open = yield* Effect.makeLatch(true)
    const hook = yield* Ref.make<Effect.Effect<void>>(Effect.void)

    const gated =
      <Args extends ReadonlyArray<unknown>, A, E, R>(call: (...args: Args) => Effect.Effect<A, E, R>) =>
      (...args: Args) =>
        Effect.zipRight(open.await, call(...args))

    const faulty: ChainClientShape = {
      ...client,
      verifyMessage: gated(client.verifyMessage),
      transferCheck: gated(client.transferCheck),
      balanceOf: gated(client.balanceOf),
      usd1Parties: gated(client.usd1Parties),
      usd1Positions: gated(client.usd1Positions),
      permitNonce: gated(client.permitNonce),
      authorizationState: gated(client.authorizationState),
      authorizationUsedIn: gated(client.authorizationUsedIn),
      usd1DomainSeparator: Effect.zipRight(open.await, client.usd1DomainSeparator),
      transferWithAuthorization: (authorization, signature, record) =>
        Effect.zipRight(
          open.await,
          client.transferWithAuthorization(authorization, signature, (signed) =>
            Effect.zipLeft(record(signed), Effect.flatten(Ref.getAndSet(hook, Effect.void)))
          )
        ),
      rebroadcast: gated(client.rebroadcast),
      receipt: gated(client.receipt),
      feedRound: gated(client.feedRound),
      tokenPaused: gated(client.tokenPaused),
      feedStates: gated(client.feedStates),
      blockTime: Effect.zipRight(open.await, client.blockTime)
    }
    return Context.add(inner, ChainClient, faulty).pipe(
      Context.add(ChainFaults, {
        stall: open.close,
        resume: open.open,
        afterRecord: (next) => Ref.set(hook, next)
      })
    )
  })
)
