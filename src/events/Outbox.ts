/**
 * A stream's outgoing frames: what was rendered for it and not yet handed to its connection,
 * bounded in bytes. The response writer takes everything pending at once (one write); when the
 * client reads slowly the writer waits for the socket to drain, the outbox fills, and `offer`
 * refuses more: the events stay in the database until there is room (or the stream is closed for
 * being too slow), so a slow reader never grows this process's memory past the bound.
 */
import { Effect } from "effect"

export class Outbox {
  private frames: Array<string> = []
  private bytes = 0
  private ended = false
  private waiter: ((text: string | undefined) => void) | undefined = undefined
  /** Takes by the writer so far: a stream whose count does not move between heartbeats is stuck. */
  takes = 0

  constructor(
    /** The most bytes pending at once (a single larger frame is still taken when the outbox is empty). */
    readonly capacity: number,
    /** Called after the writer took everything pending: there is room again. */
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

  /** No more frames after `last` (if any); the writer ends the response once it took what is pending. */
  end(last?: string) {
    if (this.ended) return
    if (last !== undefined) this.push(last, Buffer.byteLength(last))
    this.ended = true
    this.wake()
  }

  /** Everything pending as one text, waiting for some; undefined once ended and taken. */
  readonly take: Effect.Effect<string | undefined> = Effect.suspend(() =>
    this.frames.length > 0 || this.ended
      ? Effect.succeed(this.drain())
      : Effect.async<string | undefined>((resume) => {
          this.waiter = (text) => resume(Effect.succeed(text))
          return Effect.sync(() => {
            this.waiter = undefined
          })
        })
  )

  private push(frame: string, size: number) {
    this.frames.push(frame)
    this.bytes += size
    this.wake()
  }

  private wake() {
    const waiter = this.waiter
    if (waiter === undefined) return
    this.waiter = undefined
    waiter(this.drain())
  }

  private drain(): string | undefined {
    if (this.frames.length === 0) return undefined
    const text = this.frames.length === 1 ? this.frames[0]! : this.frames.join("")
    this.frames = []
    this.bytes = 0
    this.takes++
    this.drained()
    return text
  }
}
