/**
 * A stream's outgoing frames: what was rendered for it and not yet handed to its connection,
 * bounded in bytes. The connection takes everything pending at once (one write) when it can take
 * more; when the client reads slowly the socket does not drain, nothing is taken, the outbox fills
 * and `offer` refuses more: the events stay in the database until there is room (or the stream is
 * closed for being too slow), so a slow reader never grows this process's memory past the bound.
 */
import { Effect } from "effect"

export class Outbox {
  private frames: Array<string> = []
  private bytes = 0
  private ended = false
  private waiter: (() => void) | undefined = undefined
  /** Takes so far: a stream whose count does not move between heartbeats is stuck. */
  takes = 0

  constructor(
    /** The most bytes pending at once (a single larger frame is still taken when the outbox is empty). */
    readonly capacity: number,
    /** Called after everything pending was taken: there is room again. */
    private readonly drained: () => void = () => {}
  ) {}

  get pendingBytes() {
    return this.bytes
  }

  get isEnded() {
    return this.ended
  }

  /** Queues a frame; false when it does not fit (the reader is behind) or the outbox has ended. */
  offer(frame: string): boolean {
    if (this.ended) return false
    const size = Buffer.byteLength(frame)
    if (this.bytes > 0 && this.bytes + size > this.capacity) return false
    this.push(frame, size)
    return true
  }

  /** No more frames after `last` (if any); the connection ends once it took what is pending. */
  end(last?: string) {
    if (this.ended) return
    if (last !== undefined) this.push(last, Buffer.byteLength(last))
    this.ended = true
    this.wake()
  }

  /** Everything pending as one text; undefined when nothing is (see `isEnded`). */
  poll(): string | undefined {
    if (this.frames.length === 0) return undefined
    const text = this.frames.length === 1 ? this.frames[0]! : this.frames.join("")
    this.frames = []
    this.bytes = 0
    this.takes++
    this.drained()
    return text
  }

  /** Calls `ready` once, when there is something to poll or the outbox has ended (now, if so). */
  whenReady(ready: () => void) {
    if (this.frames.length > 0 || this.ended) ready()
    else this.waiter = ready
  }

  /** Everything pending, waiting for some; undefined once ended and taken. */
  readonly take: Effect.Effect<string | undefined> = Effect.async<string | undefined>((resume) => {
    this.whenReady(() => resume(Effect.sync(() => this.poll())))
    return Effect.sync(() => {
      this.waiter = undefined
    })
  })

  private push(frame: string, size: number) {
    this.frames.push(frame)
    this.bytes += size
    this.wake()
  }

  private wake() {
    const waiter = this.waiter
    this.waiter = undefined
    waiter?.()
  }
}
