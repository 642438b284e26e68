/** Hostile values and the seeded generator the fuzzer draws from. */

export type Rng = () => number

/** mulberry32: a small, fast, seeded generator (the run is reproducible from its seed). */
export const seeded = (seed: number): Rng => {
  let state = seed >>> 0
  return () => {
    state = (state + 0x6d2b79f5) >>> 0
    let t = state
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296
  }
}

export const pick = <A>(rng: Rng, items: ReadonlyArray<A>): A => items[Math.floor(rng() * items.length)] as A

const repeat = (rng: Rng, min: number, max: number) => min + Math.floor(rng() * (max - min + 1))

/**
 * A string matching a regular expression of the subset JSON Schemas here use: anchors, literals,
 * escapes (\d \w \/ ...), classes with ranges, groups with alternatives, and the quantifiers
 * ? * + {n} {n,m}.
 */
export const stringFromPattern = (pattern: string, rng: Rng): string => {
  let at = 0
  const classChars = (): ReadonlyArray<string> => {
    const chars: Array<string> = []
    at++ // [
    while (pattern[at] !== "]" && at < pattern.length) {
      let char = pattern[at++]!
      if (char === "\\") char = pattern[at++]!
      if (pattern[at] === "-" && pattern[at + 1] !== "]") {
        const end = pattern[at + 1]!
        at += 2
        for (let c = char.charCodeAt(0); c <= end.charCodeAt(0); c++) chars.push(String.fromCharCode(c))
      } else {
        chars.push(char)
      }
    }
    at++ // ]
    return chars
  }
  const escapes: Record<string, ReadonlyArray<string>> = {
    d: "0123456789".split(""),
    w: "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_".split(""),
    s: [" "]
  }
  const alternatives = (): (() => string) => {
    const options: Array<() => string> = [sequence()]
    while (pattern[at] === "|") {
      at++
      options.push(sequence())
    }
    return () => pick(rng, options)()
  }
  const sequence = (): (() => string) => {
    const parts: Array<() => string> = []
    while (at < pattern.length && pattern[at] !== "|" && pattern[at] !== ")") {
      const char = pattern[at]!
      let atom: () => string
      if (char === "^" || char === "$") {
        at++
        continue
      } else if (char === "[") {
        const chars = classChars()
        atom = () => pick(rng, chars)
      } else if (char === "(") {
        at++
        const inner = alternatives()
        at++ // )
        atom = inner
      } else if (char === "\\") {
        const escaped = pattern[at + 1]!
        at += 2
        const chars = escapes[escaped] ?? [escaped]
        atom = () => pick(rng, chars)
      } else if (char === ".") {
        at++
        atom = () => "x"
      } else {
        at++
        atom = () => char
      }
      let [min, max] = [1, 1]
      const quantifier = pattern[at]
      if (quantifier === "?") [min, max, at] = [0, 1, at + 1]
      else if (quantifier === "*") [min, max, at] = [0, 4, at + 1]
      else if (quantifier === "+") [min, max, at] = [1, 4, at + 1]
      else if (quantifier === "{") {
        const close = pattern.indexOf("}", at)
        const [low, high] = pattern.slice(at + 1, close).split(",")
        min = Number(low)
        max = high === undefined ? min : high === "" ? min + 4 : Math.min(Number(high), min + 40)
        at = close + 1
      }
      const [low, high] = [min, max]
      parts.push(() => Array.from({ length: repeat(rng, low, high) }, atom).join(""))
    }
    return () => parts.map((part) => part()).join("")
  }
  return alternatives()()
}

const deep = (depth: number): unknown => {
  let value: unknown = 1
  for (let i = 0; i < depth; i++) value = [value]
  return value
}

const strings: ReadonlyArray<string> = [
  "",
  " ",
  "\u0000",
  "a\u0000b",
  "\ud800",
  "x\udfff",
  "\ufeff",
  "%00",
  "x".repeat(5_000),
  "x".repeat(70_000),
  "💥".repeat(100),
  "\u202e\u0301",
  "../../etc/passwd",
  "<script>alert(1)</script>",
  "' OR 1=1 --",
  "'; DROP TABLE orders; --",
  "$" + "{jndi:ldap://x}",
  "NaN",
  "Infinity",
  "-1",
  "0",
  "-0",
  "1e309",
  "9".repeat(400),
  "0.0000001",
  "1.1234567",
  "1000000.000001",
  "0x",
  `0x${"f".repeat(64)}`,
  `0x${"0".repeat(40)}`,
  "2026-13-45T99:99:99Z",
  "2026-11-22T10:00:00",
  "99999999999999999999",
  "null",
  "true",
  "[]",
  "{}",
  "\r\n",
  "\t",
  "\\",
  '"',
  "__proto__",
  "constructor"
]

const numbers: ReadonlyArray<number> = [-1, 0, -0, 1.5, 1e308, -1e308, 2 ** 53 + 1, Number.MAX_SAFE_INTEGER, 5e-324]

export const hostileValues = {
  strings,
  any: [
    ...strings,
    ...numbers,
    null,
    true,
    false,
    [],
    {},
    [null],
    JSON.parse('{"__proto__": {"polluted": true}, "constructor": {"prototype": {}}}') as unknown,
    deep(50),
    { a: { b: { c: { d: "\u0000" } } } },
    Array.from({ length: 2_000 }, (_, i) => i)
  ] as ReadonlyArray<unknown>,
  authorizations: [
    "Bearer ",
    "Bearer",
    "Basic dXNlcjpwYXNz",
    `Bearer ${"A".repeat(43)}`,
    `Bearer ${"x".repeat(8_000)}`,
    "Bearer a b c",
    "bearer lowercase",
    "Bearer %00"
  ]
}

/** Whole bodies no schema accepts, with the content type they go with (none: the operation's). */
export const rawBodies: ReadonlyArray<{ readonly body: string | Uint8Array; readonly contentType?: string }> = [
  { body: "{" },
  { body: '{"a":1,}' },
  { body: "[".repeat(10_000) },
  { body: `${"[".repeat(8_000)}${"]".repeat(8_000)}` },
  { body: `${'{"a":'.repeat(5_000)}1${"}".repeat(5_000)}` },
  { body: "1e999" },
  { body: "9".repeat(20_000) },
  { body: '"\\u0000"' },
  { body: '{"a":"\\ud800"}' },
  { body: '{"\\u0000":1}' },
  { body: new Uint8Array([0xff, 0xfe, 0x7b, 0x7d]) },
  { body: new Uint8Array([0x7b, 0x22, 0x61, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d]) },
  { body: "\ufeff{}" },
  { body: "null" },
  { body: "[]" },
  { body: '"string"' },
  { body: "0" },
  { body: "{}\n{}" },
  { body: "x".repeat(70_000) },
  { body: "------x\r\nContent-Disposition: form-data\r\n\r\n", contentType: "multipart/form-data; boundary=----x" },
  { body: "not multipart", contentType: "multipart/form-data" },
  { body: "hello", contentType: "text/plain" },
  { body: "<a/>", contentType: "application/xml" },
  { body: "{}", contentType: "application/octet-stream" },
  { body: "a=%00&b=%ZZ", contentType: "application/x-www-form-urlencoded" },
  { body: "{}", contentType: "application/json; charset=utf-16" },
  { body: "{}", contentType: "" }
]
