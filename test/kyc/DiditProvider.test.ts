import { describe, expect, it } from "@effect/vitest"
import { Option, Redacted } from "effect"
import { diditStatus, documentOf } from "../../src/kyc/DiditProvider.js"

describe("Didit mapping", () => {
  it("maps Didit's exact status strings", () => {
    expect(["Not Started", "In Progress", "In Review", "Resubmitted", "Awaiting User"].map(diditStatus)).toEqual([
      "pending",
      "pending",
      "pending",
      "pending",
      "pending"
    ])
    expect(diditStatus("Approved")).toBe("approved")
    expect(diditStatus("Declined")).toBe("declined")
    expect(["Expired", "Abandoned", "Kyc Expired"].map(diditStatus)).toEqual(["expired", "expired", "expired"])
    // Case and spaces matter; unknown values are not guessed.
    expect(diditStatus("approved")).toBeUndefined()
    expect(diditStatus("InReview")).toBeUndefined()
    expect(diditStatus("toString")).toBeUndefined()
  })

  it("reads the verified name and document number from the decision", () => {
    const v3 = documentOf({
      id_verifications: [
        { status: "Declined", first_name: null, last_name: null, document_number: null },
        { status: "Approved", first_name: "Carmen", last_name: "Española Española", document_number: "CAA000000" }
      ]
    })
    expect(Option.map(v3, (d) => [d.fullName, Redacted.value(d.documentNumber)])).toEqual(
      Option.some(["Carmen Española Española", "CAA000000"])
    )
    const v2 = documentOf({ id_verification: { full_name: "  Jane Roe ", document_number: "P123" } })
    expect(Option.map(v2, (d) => d.fullName)).toEqual(Option.some("Jane Roe"))
    expect(documentOf({ id_verifications: [{ first_name: "No", last_name: "Number" }] })).toEqual(Option.none())
    expect(documentOf({ id_verifications: null })).toEqual(Option.none())
    expect(documentOf({})).toEqual(Option.none())
  })
})
