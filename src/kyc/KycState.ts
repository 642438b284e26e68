import { Schema } from "effect"

/** Identity-check state of a user, as the seed names it. */
export const KycState = Schema.Literal("none", "pending", "approved", "declined", "duplicate").annotations({
  identifier: "KycState"
})
export type KycState = typeof KycState.Type
