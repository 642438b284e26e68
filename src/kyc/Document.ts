/** Identity documents as the identity check reads them. Pure. */
import type { Redacted } from "effect"

/** What the provider read from the identity document. The number is never logged. */
export interface VerifiedDocument {
  readonly fullName: string
  readonly documentNumber: Redacted.Redacted<string>
}

/** Upper case, compatibility-normalised, separators (spaces, dashes, dots, slashes) removed. */
export const normalizeDocumentNumber = (text: string): string =>
  text
    .normalize("NFKC")
    .toUpperCase()
    .replace(/[^\p{L}\p{N}]/gu, "")
