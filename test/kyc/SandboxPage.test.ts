import { describe, expect, it } from "@effect/vitest"
import { Either, Option, Redacted } from "effect"
import { checkForm } from "../../src/kyc/SandboxDesk.js"
import { sandboxPage } from "../../src/kyc/SandboxPage.js"
import { sessionStatusOf } from "../../src/kyc/SandboxProvider.js"

describe("sandbox page", () => {
  it("the open page is a self-contained form with the four outcomes", () => {
    const html = sandboxPage({ state: "open", returnUrl: "https://app.example.com/" })
    for (const field of ['name="fullName"', 'name="documentNumber"', 'method="post"']) expect(html).toContain(field)
    for (const outcome of ["approve", "decline", "duplicate", "abandon"]) expect(html).toContain(`value="${outcome}"`)
    // No external assets and no script.
    expect(html).not.toMatch(/<script|<link|<img|src=|@import|url\(/i)
    expect(html).not.toContain("action=")
  })

  it("escapes the return URL", () => {
    const html = sandboxPage({ state: "finished", returnUrl: "https://app.example.com/?a=\"><script>x</script>&b='" })
    expect(html).not.toContain("<script>")
    expect(html).toContain("&quot;&gt;&lt;script&gt;x&lt;/script&gt;&amp;b=&#39;")
    expect(sandboxPage({ state: "expired", returnUrl: "https://app.example.com/" })).toContain("no longer valid")
  })
})

describe("sandbox form", () => {
  it("approve needs a name and a document number; the others take what is given", () => {
    expect(Either.isLeft(checkForm({ outcome: "approve" }))).toBe(true)
    expect(checkForm({ outcome: "decline", fullName: "", documentNumber: "" })).toEqual(Either.right(Option.none()))
    const ok = checkForm({ outcome: "approve", fullName: "  Ada \n Lovelace ", documentNumber: " X-12 34 " })
    expect(Either.isRight(ok)).toBe(true)
    const doc = Option.getOrThrow(Either.getOrThrow(ok))
    expect(doc.fullName).toBe("Ada Lovelace")
    expect(Redacted.value(doc.documentNumber)).toBe("X-12 34")
    for (const documentNumber of ["12", "----", "<b>123</b>", "a".repeat(33)]) {
      expect(Either.isLeft(checkForm({ outcome: "approve", fullName: "A", documentNumber })), documentNumber).toBe(true)
    }
    expect(Either.isLeft(checkForm({ outcome: "approve", fullName: "A\u0000B", documentNumber: "1234" }))).toBe(true)
  })

  it("abandoned sessions count as expired", () => {
    expect(sessionStatusOf("abandoned")).toBe("expired")
    expect(sessionStatusOf("approved")).toBe("approved")
  })
})
