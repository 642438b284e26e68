/**
 * Whether the service can be reached. A call that cannot reach it marks the connection lost; the
 * app then shows a banner and checks `GET /health` with a growing pause (1 s up to 8 s) until the
 * service answers again, then clears the banner and tells the screens to read their data again.
 */
import { signal } from "@preact/signals"

export type ConnectionState = "ok" | "lost"

export const connection = signal<ConnectionState>("ok")
/** Increases each time the connection comes back: screens re-read what they show. */
export const reconnections = signal(0)

const FIRST_PAUSE_MS = 1_000
const LONGEST_PAUSE_MS = 8_000

const answers = async () => {
  try {
    const response = await fetch("/health", { cache: "no-store" })
    return response.ok
  } catch {
    return false
  }
}

let probing = false

const probe = async () => {
  if (probing) return
  probing = true
  let pause = FIRST_PAUSE_MS
  while (!(await answers())) {
    await new Promise((resolve) => setTimeout(resolve, pause))
    pause = Math.min(pause * 2, LONGEST_PAUSE_MS)
  }
  probing = false
  connection.value = "ok"
  reconnections.value += 1
}

/** A request could not reach the service (or the browser went offline). */
export const connectionLost = () => {
  connection.value = "lost"
  void probe()
}

window.addEventListener("offline", connectionLost)
window.addEventListener("online", () => {
  if (connection.value === "lost") void probe()
})
