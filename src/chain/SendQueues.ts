/**
 * One ordered send queue per sending address, as a chain orders one account's nonces, with the
 * account's next nonce kept while it is known.
 */
import { Effect } from "effect"
import type { Address } from "./Address.js"

/**
 * An account's sends, one at a time, and its next nonce. The nonce is read and changed only inside
 * `serially`, so it needs no further guard.
 */
export class SendQueue {
  private readonly permit = Effect.unsafeMakeSemaphore(1)
  private next: number | undefined

  /** Runs `send` alone among this account's sends, in arrival order. */
  readonly serially = <A, E, R>(send: Effect.Effect<A, E, R>) => this.permit.withPermits(1)(send)

  /** The next nonce: the one kept since the last broadcast, else `fetch`'s (the chain's count). */
  readonly nonce = <E, R>(fetch: Effect.Effect<number, E, R>) =>
    Effect.suspend(() => (this.next === undefined ? fetch : Effect.succeed(this.next)))

  /** A transaction with `nonce` was broadcast: the next one takes the nonce after it. */
  readonly sent = (nonce: number) =>
    Effect.sync(() => {
      this.next = nonce + 1
    })

  /** The next nonce, when it is known. */
  readonly known = Effect.sync(() => this.next)

  /** The nonces below `next` are taken: the next send takes `next`. */
  readonly continueAt = (next: number) =>
    Effect.sync(() => {
      this.next = next
    })

  /** A send failed or its fate is unknown: the next send asks the chain. */
  readonly forget = Effect.sync(() => {
    this.next = undefined
  })
}

/** The queue of each sender (any letter case), made on first use and kept. */
export const sendQueues = (): ((sender: Address) => SendQueue) => {
  const queues = new Map<string, SendQueue>()
  return (sender) => {
    const known = queues.get(sender.toLowerCase())
    if (known !== undefined) return known
    const queue = new SendQueue()
    queues.set(sender.toLowerCase(), queue)
    return queue
  }
}
