/** The SSE framing both ways: whatever the chunking, the parser gives back exactly the frames written. */
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { formatComment, formatFrame, type SseFrame, SseParser } from "../../src/events/Sse.js"

/** One field's text: anything but line breaks (and NUL, for ids). */
const oneLine = FastCheck.string({ unit: "binary", maxLength: 20 }).map((text) => text.replace(/[\r\n\0]/g, ""))
/** Data: any text; CR LF and lone CR are line breaks like LF. */
const data = FastCheck.string({ unit: "binary", maxLength: 60 })

const frame: FastCheck.Arbitrary<SseFrame> = FastCheck.record(
  {
    event: oneLine.filter((text) => text !== ""),
    id: oneLine,
    data,
    retry: FastCheck.nat(100_000)
  },
  { requiredKeys: ["data"] }
)

/** Splits a text into pieces at arbitrary points (CRLF pairs and surrogate pairs may be split). */
const chunked = (text: string, cuts: ReadonlyArray<number>) => {
  const points = [...new Set(cuts.map((cut) => cut % (text.length + 1)))].sort((a, b) => a - b)
  const pieces: Array<string> = []
  let from = 0
  for (const point of points) {
    pieces.push(text.slice(from, point))
    from = point
  }
  pieces.push(text.slice(from))
  return pieces
}

const parseAll = (pieces: ReadonlyArray<string>) => {
  const parser = new SseParser()
  return { events: pieces.flatMap((piece) => parser.push(piece)), parser }
}

describe("SSE framing", () => {
  it.prop(
    "format then parse, in any chunking, gives each frame's event, data and id back",
    [FastCheck.array(frame, { maxLength: 8 }), FastCheck.array(FastCheck.nat(10_000), { maxLength: 12 })],
    ([frames, cuts]) => {
      const text = frames.map((f, i) => (i % 2 === 0 ? formatComment("ping") : "") + formatFrame(f)).join("")
      const { events, parser } = parseAll(chunked(text, cuts))
      let lastEventId = ""
      const expected = frames.map((f) => {
        if (f.id !== undefined) lastEventId = f.id
        return { event: f.event ?? "message", data: f.data.replace(/\r\n|\r/g, "\n"), lastEventId }
      })
      expect(events).toEqual(expected)
      const retries = frames.filter((f) => f.retry !== undefined)
      expect(parser.retry).toBe(retries.length === 0 ? undefined : retries[retries.length - 1]!.retry)
    },
    { fastCheck: { numRuns: 500 } }
  )

  it("parses the standard's examples: CR, CRLF, fields without a space, comments, unknown fields, a BOM", () => {
    const { events } = parseAll([
      "\uFEFFdata: first\r\rdata:no space\r\nid: 7\r\n\r\n",
      ": a comment\nfoo: ignored\nevent: kyc\ndata\ndata: x\n\n",
      "data: no end yet"
    ])
    expect(events).toEqual([
      { event: "message", data: "first", lastEventId: "" },
      { event: "message", data: "no space", lastEventId: "7" },
      { event: "kyc", data: "\nx", lastEventId: "7" }
    ])
  })

  it("an event without data is not dispatched, and its name does not leak into the next", () => {
    const { events } = parseAll(["event: kyc\nid: 3\n\ndata: later\n\n"])
    expect(events).toEqual([{ event: "message", data: "later", lastEventId: "3" }])
  })

  it("a CR at the end of a chunk and a LF at the start of the next are one line break", () => {
    const { events } = parseAll(["data: a\r", "", "\ndata: b\r", "\n\r", "\n"])
    expect(events).toEqual([{ event: "message", data: "a\nb", lastEventId: "" }])
  })

  it("refuses to write a name or an id across lines", () => {
    expect(() => formatFrame({ event: "a\nb", data: "" })).toThrow()
    expect(() => formatFrame({ id: "1\r", data: "" })).toThrow()
    expect(() => formatFrame({ id: "1\0", data: "" })).toThrow()
  })
})
