/** One ordered send queue per sending address, as a chain orders one account's nonces. */
import { Effect } from "effect"
import type { Address } from "./Address.js"

/** The queue of each sender (any letter case), made on first use and kept. */
export const sendQueues = (): ((sender: Address) => Effect.Semaphore) => {
  const queues = new Map<string, Effect.Semaphore>()
  return (sender) => {
    const known = queues.get(sender.toLowerCase())
    if (known !== undefined) return known
    const queue = Effect.unsafeMakeSemaphore(1)
    queues.set(sender.toLowerCase(), queue)
    return queue
  }
}
