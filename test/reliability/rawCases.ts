/**
 * Requests at the byte level, for Node's parser and the server's timeouts: broken framing, odd
 * request lines, oversize heads, bodies and heads that never arrive, things that are not HTTP/1.1.
 * Each must be answered with an `{error, code}` body (or a success), and none may hang.
 */
const head = (line: string, headers = "") => `${line}\r\nHost: fuzz\r\n${headers}`

export const rawCases: ReadonlyArray<{
  readonly name: string
  readonly parts: ReadonlyArray<string | Uint8Array | number>
}> = [
  {
    name: "duplicate content-length",
    parts: [`${head("POST /auth/challenge HTTP/1.1", "Content-Length: 2\r\nContent-Length: 3\r\n")}\r\n{}`]
  },
  {
    name: "negative content-length",
    parts: [`${head("POST /auth/challenge HTTP/1.1", "Content-Length: -1\r\n")}\r\n`]
  },
  {
    name: "non-numeric content-length",
    parts: [`${head("POST /auth/challenge HTTP/1.1", "Content-Length: ten\r\n")}\r\n`]
  },
  {
    name: "content-length and transfer-encoding",
    parts: [
      `${head("POST /auth/challenge HTTP/1.1", "Content-Length: 3\r\nTransfer-Encoding: chunked\r\n")}\r\n0\r\n\r\n`
    ]
  },
  {
    name: "transfer-encoding chunked, identity",
    parts: [`${head("POST /auth/challenge HTTP/1.1", "Transfer-Encoding: chunked, identity\r\n")}\r\n0\r\n\r\n`]
  },
  {
    name: "bad chunk size",
    parts: [`${head("POST /auth/challenge HTTP/1.1", "Transfer-Encoding: chunked\r\n")}\r\nzz\r\n{}\r\n0\r\n\r\n`]
  },
  {
    name: "huge chunk extension",
    parts: [
      `${head("POST /auth/challenge HTTP/1.1", "Transfer-Encoding: chunked\r\n")}\r\n2;${"e".repeat(20_000)}\r\n{}\r\n0\r\n\r\n`
    ]
  },
  {
    name: "chunked body over 64 KiB",
    parts: [
      `${head("POST /merchant/orders HTTP/1.1", "Content-Type: application/json\r\nTransfer-Encoding: chunked\r\n")}\r\n`,
      ...Array.from({ length: 12 }, () => `2000\r\n${"x".repeat(0x2000)}\r\n`),
      "0\r\n\r\n"
    ]
  },
  { name: "unknown method", parts: [`${head("BREW /health HTTP/1.1")}\r\n`] },
  { name: "lower-case method", parts: [`${head("get /health HTTP/1.1")}\r\n`] },
  { name: "raw spaces in the path", parts: [`${head("GET /merchant/orders/a b HTTP/1.1")}\r\n`] },
  { name: "request line of 20 KB", parts: [`${head(`GET /${"a".repeat(20_000)} HTTP/1.1`)}\r\n`] },
  { name: "headers over 16 KiB", parts: [`${head("GET /health HTTP/1.1", `X-Big: ${"a".repeat(20_000)}\r\n`)}\r\n`] },
  {
    name: "3000 headers",
    parts: [`${head("GET /health HTTP/1.1", Array.from({ length: 3_000 }, (_, i) => `X-${i}: 1\r\n`).join(""))}\r\n`]
  },
  { name: "header without a colon", parts: [`${head("GET /health HTTP/1.1", "NoColonHere\r\n")}\r\n`] },
  { name: "NUL in a header value", parts: [`${head("GET /health HTTP/1.1", "X-Nul: a\u0000b\r\n")}\r\n`] },
  { name: "obsolete line folding", parts: [`${head("GET /health HTTP/1.1", "X-Fold: a\r\n b\r\n")}\r\n`] },
  { name: "bare LF line endings", parts: ["GET /health HTTP/1.1\nHost: fuzz\n\n"] },
  { name: "HTTP/1.1 without Host", parts: ["GET /health HTTP/1.1\r\n\r\n"] },
  { name: "HTTP/1.0 without Host", parts: ["GET /health HTTP/1.0\r\n\r\n"] },
  { name: "HTTP/9.9", parts: [`${head("GET /health HTTP/9.9")}\r\n`] },
  { name: "absolute-form target", parts: [`${head("GET http://fuzz/health HTTP/1.1")}\r\n`] },
  { name: "asterisk target", parts: [`${head("OPTIONS * HTTP/1.1")}\r\n`] },
  { name: "CONNECT", parts: [`${head("CONNECT fuzz:443 HTTP/1.1")}\r\n`] },
  { name: "upgrade to h2c", parts: [`${head("GET /health HTTP/1.1", "Connection: Upgrade\r\nUpgrade: h2c\r\n")}\r\n`] },
  { name: "HTTP/2 preface", parts: ["PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"] },
  {
    name: "TLS client hello",
    parts: [new Uint8Array([0x16, 0x03, 0x01, 0x00, 0xa5, 0x01, 0x00, 0x00, 0xa1, 0x03, 0x03])]
  },
  { name: "binary garbage", parts: [new Uint8Array(Array.from({ length: 512 }, (_, i) => (i * 37) % 256))] },
  {
    name: "Expect: 100-continue",
    parts: [
      `${head("POST /auth/challenge HTTP/1.1", "Content-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n")}\r\n`,
      200,
      "{}"
    ]
  },
  { name: "Expect: something else", parts: [`${head("GET /health HTTP/1.1", "Expect: teapot\r\n")}\r\n`] },
  {
    name: "body that never arrives",
    parts: [
      `${head("POST /auth/challenge HTTP/1.1", "Content-Type: application/json\r\nContent-Length: 100\r\n")}\r\n{`
    ]
  },
  {
    name: "chunked body that never ends",
    parts: [`${head("POST /auth/challenge HTTP/1.1", "Transfer-Encoding: chunked\r\n")}\r\n1\r\n{\r\n`]
  },
  { name: "head that never ends", parts: [`${head("GET /health HTTP/1.1", "X-Slow: 1\r\n")}`] },
  {
    name: "head sent byte by byte",
    parts: Array.from("GET /health HTTP/1.1\r\nHost: fuzz\r\n\r\n").flatMap((c) => [c, 5])
  },
  { name: "a connection that sends nothing", parts: [] }
]
