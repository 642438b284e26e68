/** Identity documents as the identity check reads them. Pure. */
import type { Redacted } from "effect"

/** What the provider read from the identity document. The number is never logged. */
export interface VerifiedDocument {
  readonly fullName: string
  readonly documentNumber: Redacted.Redacted<string>
}
