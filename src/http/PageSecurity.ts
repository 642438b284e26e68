/**
 * What a browser is told about this service's responses: never sniff a type (`nosniff`, on every
 * response), and for HTML pages a strict Content-Security-Policy: nothing loaded from elsewhere,
 * never framed, and no script but the page's own inline scripts, each allowed by its SHA-256 hash
 * (so an injected script never runs). Pure: no I/O.
 */
import { createHash } from "node:crypto"

/** Every response: a browser takes the declared content type, never a guess from the bytes. */
export const NOSNIFF = { "x-content-type-options": "nosniff" } as const

/**
 * A page without script (the landing page, the sandbox identity page): its inline styles only,
 * nothing loaded, never framed, no `<base>`.
 */
export const STATIC_PAGE_CSP = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'"

/**
 * The web app's page (/app): its own script and stylesheet files only, `data:` images (wallets'
 * EIP-6963 icons), requests to this origin only, never framed, no `<base>`, no form submission.
 */
export const APP_PAGE_CSP = [
  "default-src 'none'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "font-src 'self'",
  "connect-src 'self'",
  "manifest-src 'self'",
  "frame-ancestors 'none'",
  "base-uri 'none'",
  "form-action 'none'"
].join("; ")

/** `<script>` elements without `src`: their attributes and text. */
const INLINE_SCRIPT = /<script\b([^>]*)>([\s\S]*?)<\/script\s*>/gi
/** A `type` a browser runs (none, a JavaScript MIME type, or `module`); others are data blocks. */
const RUNNABLE_TYPE = /^\s*$|^(text|application)\/(java|ecma)script$|^module$/i

/** The CSP source of each inline script a browser would run, `'sha256-…'`, in document order. */
export const inlineScriptHashes = (html: string): ReadonlyArray<string> =>
  [...html.matchAll(INLINE_SCRIPT)].flatMap(([, attributes = "", text = ""]) => {
    if (/\ssrc\s*=/i.test(` ${attributes}`)) return []
    const type = /\stype\s*=\s*["']?([^"'\s>]*)/i.exec(` ${attributes}`)?.[1] ?? ""
    if (!RUNNABLE_TYPE.test(type)) return []
    return [`'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`]
  })

/**
 * The policy of an HTML page with scripts (/docs): exactly its inline scripts (by hash) and
 * WebAssembly, its inline styles and images or fonts from itself or data URLs; requests only to itself and `connectTo`
 * (origins the page may call, the API's); never framed, no `<base>`, no form submission.
 */
export const scriptedPageCsp = (html: string, connectTo: ReadonlyArray<string> = []): string =>
  [
    "default-src 'none'",
    // 'wasm-unsafe-eval' lets the page compile WebAssembly (Scalar parses the document with it);
    // it does not allow eval() or any script text.
    `script-src ${["'wasm-unsafe-eval'", ...new Set(inlineScriptHashes(html))].join(" ")}`,
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self' data:",
    `connect-src ${["'self'", ...new Set(connectTo)].join(" ")}`,
    "frame-ancestors 'none'",
    "base-uri 'none'",
    "form-action 'none'"
  ].join("; ")
