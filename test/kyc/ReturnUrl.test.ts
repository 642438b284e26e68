import { describe, expect, it } from "@effect/vitest"
import { FastCheck } from "effect"
import { defaultReturnUrl, resolveReturnUrl, trustedReturnUrl } from "../../src/kyc/ReturnUrl.js"

const policy = { webOrigins: ["https://app.example.com", "http://localhost:5173"], appUrl: "https://app.example.com" }
const DEFAULT = "https://app.example.com/"

describe("returnUrl", () => {
  it("keeps URLs on an exact trusted origin, normalised", () => {
    expect(resolveReturnUrl("https://app.example.com/kyc/done?x=1#y", policy)).toBe(
      "https://app.example.com/kyc/done?x=1#y"
    )
    expect(resolveReturnUrl("https://APP.example.com/a", policy)).toBe("https://app.example.com/a")
    expect(resolveReturnUrl("https://app.example.com:443/a", policy)).toBe("https://app.example.com/a")
    expect(resolveReturnUrl("http://localhost:5173/back", policy)).toBe("http://localhost:5173/back")
    expect(resolveReturnUrl("https://app.example.com/a/../b", policy)).toBe("https://app.example.com/b")
  })

  it("replaces everything else with APP_URL/", () => {
    for (const trick of [
      undefined,
      null,
      "",
      "https://app.example.com.evil.com/",
      "https://app.example.evil.com",
      "https://app.example.com@evil.com/",
      "https://app.example@evil.com",
      "https://app.example.com:pw@evil.com/",
      "https://user@app.example.com/",
      "https://evil.com/https://app.example.com/",
      "https://evil.com?https://app.example.com",
      "javascript:alert(1)",
      "JavaScript://app.example.com/%0aalert(1)",
      "data:text/html,<script>alert(1)</script>",
      "//evil.com",
      "///evil.com",
      "/\\evil.com",
      "https:/\\evil.com",
      "https://app.example.com\\@evil.com",
      "https:evil.com",
      "/relative",
      "app.example.com/path",
      "https://app.example.com:8443/",
      "http://app.example.com/",
      "ftp://app.example.com/",
      "http://localhost:5174/",
      "http://127.0.0.1:5173/",
      " https://app.example.com/",
      "https://app.example.com/\n",
      "https://app.example.com/\tx",
      `https://app.example.com/${"a".repeat(2100)}`
    ]) {
      expect(resolveReturnUrl(trick, policy), String(trick)).toBe(DEFAULT)
    }
  })

  it("the default is APP_URL with one trailing slash", () => {
    expect(defaultReturnUrl({ webOrigins: [], appUrl: "https://x.test" })).toBe("https://x.test/")
    expect(defaultReturnUrl({ webOrigins: [], appUrl: "https://x.test/app/" })).toBe("https://x.test/app/")
  })

  it.prop(
    "any path on a trusted origin is kept",
    [FastCheck.webPath(), FastCheck.constantFrom(...policy.webOrigins)],
    ([path, origin]) => {
      const given = `${origin}${path.startsWith("/") ? path : `/${path}`}`
      FastCheck.pre(given.length <= 2048 && !/[\s\\]/.test(given))
      const kept = trustedReturnUrl(given, policy.webOrigins)
      expect(kept).toBeDefined()
      expect(new URL(kept!).origin).toBe(origin)
    }
  )

  it.prop(
    "whatever is returned is on a trusted origin",
    [
      FastCheck.oneof(
        FastCheck.webUrl({
          withQueryParameters: true,
          withFragments: true,
          authoritySettings: { withUserInfo: true, withPort: true }
        }),
        FastCheck.string()
      )
    ],
    ([given]) => {
      const result = resolveReturnUrl(given, policy)
      const url = new URL(result)
      expect(policy.webOrigins).toContain(url.origin)
      expect(url.username).toBe("")
      expect(url.password).toBe("")
    }
  )

  it.prop(
    "other hosts are never kept, whatever their prefix",
    [FastCheck.domain(), FastCheck.webPath()],
    ([host, path]) => {
      FastCheck.pre(host !== "app.example.com")
      for (const given of [
        `https://${host}${path}`,
        `https://app.example.com.${host}${path}`,
        `https://app.example.com@${host}${path}`
      ]) {
        expect(resolveReturnUrl(given, policy)).toBe(DEFAULT)
      }
    }
  )
})
