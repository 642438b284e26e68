/**
 * Waits on the signed-in user's event stream (GET /me/events) for one event and prints it, with the
 * typed reader a card app uses (src/events/EventStreamClient.ts).
 *
 *   TOKEN=<bearer token> npx tsx scripts/await-event.ts <baseUrl> <type> [<field>=<value>] [--after <id>]
 *
 * Prints the first `<type>` event whose data has `<field>` equal to `<value>` (any, without it) as one
 * JSON line `{ event, id, data }` and exits 0; exits 1 naming what it waited for after 60 seconds, or
 * when the stream is refused. `--after <id>` resumes after that event id (Last-Event-ID): `--after 0`
 * reads the user's events from the first, so an event that happened before the script started is
 * found too. The token is read from the environment, never from the command line.
 */
import { FetchHttpClient } from "@effect/platform"
import { Effect, Option, Stream } from "effect"
import { eventStream, type StreamEvent } from "../src/Client.js"

const usage = "usage: TOKEN=<token> npx tsx scripts/await-event.ts <baseUrl> <type> [<field>=<value>] [--after <id>]"
const args = process.argv.slice(2)
const afterAt = args.indexOf("--after")
const after = afterAt === -1 ? undefined : Number(args[afterAt + 1])
const [baseUrl, type, condition] = afterAt === -1 ? args : [...args.slice(0, afterAt), ...args.slice(afterAt + 2)]
const token = process.env.TOKEN
if (baseUrl === undefined || type === undefined || token === undefined || (after !== undefined && !(after >= 0))) {
  console.error(usage)
  process.exit(2)
}
const [field, value] = condition?.split("=") ?? []

const wanted = (event: StreamEvent) =>
  event.event === type &&
  (field === undefined || String((event.data as Record<string, unknown>)[field]) === (value ?? ""))

const program = eventStream({ baseUrl, token, ...(after === undefined ? {} : { lastEventId: after }) }).pipe(
  Stream.filter(wanted),
  Stream.runHead,
  Effect.timeout("60 seconds"),
  Effect.provide(FetchHttpClient.layer)
)

Effect.runPromiseExit(program).then((exit) => {
  if (exit._tag === "Success" && Option.isSome(exit.value)) {
    console.log(JSON.stringify(exit.value.value))
    process.exit(0)
  }
  const what = `a ${type} event${condition === undefined ? "" : ` with ${condition}`}`
  console.error(`no ${what}: ${exit._tag === "Failure" ? String(exit.cause) : "the stream ended"}`)
  process.exit(1)
})
