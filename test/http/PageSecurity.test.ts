import { createHash } from "node:crypto"
import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { inlineScriptHashes, scriptedPageCsp } from "../../src/http/PageSecurity.js"

const hashOf = (text: string) => `'sha256-${createHash("sha256").update(text, "utf8").digest("base64")}'`

describe("page security", () => {
  it("hashes exactly the inline scripts a browser runs, in order", () => {
    const html = `<html><head><script>one()</script>
      <script type="application/json" id="data">{"not":"run"}</script>
      <script src="/x.js"></script>
      <SCRIPT type="module">two()</SCRIPT>
      <script type="text/javascript">three()</script></head></html>`
    expect(inlineScriptHashes(html)).toEqual([hashOf("one()"), hashOf("two()"), hashOf("three()")])
    expect(inlineScriptHashes("<p>no script</p>")).toEqual([])
  })

  it("a page's policy names its scripts by hash, never 'unsafe-inline' or 'unsafe-eval' for scripts", () => {
    FastCheck.assert(
      FastCheck.property(FastCheck.array(FastCheck.string(), { maxLength: 4 }), (scripts) => {
        const safe = scripts.map((text) => text.replaceAll("<", ""))
        const policy = scriptedPageCsp(safe.map((text) => `<script>${text}</script>`).join("\n"), [
          "https://api.example.com"
        ])
        const scriptSrc = policy.split("; ").find((directive) => directive.startsWith("script-src "))!
        for (const text of safe) expect(scriptSrc).toContain(hashOf(text))
        expect(scriptSrc).not.toMatch(/'unsafe-(inline|eval)'|'self'|\*/)
        expect(policy).toContain("frame-ancestors 'none'")
        expect(policy).toContain("connect-src 'self' https://api.example.com")
        expect(policy.startsWith("default-src 'none'; ")).toBe(true)
      })
    )
  })
})
