import { Schema } from "effect"
import { Address } from "../chain/Address.js"

/** The card face as its owner sees it over `GET /me`. Times are ms since epoch. */
export class Card extends Schema.Class<Card>("Card")({
  address: Address,
  holder: Schema.String,
  number: Schema.String.pipe(Schema.pattern(/^\d{12,19}$/)),
  expiry: Schema.String.pipe(Schema.pattern(/^(0[1-9]|1[0-2])\/\d{2}$/)),
  cvv: Schema.String.pipe(Schema.pattern(/^\d{3,4}$/)),
  createdAt: Schema.Number
}) {}

/** A card without its sealed face: who holds it and since when. */
export const CardRef = Schema.Struct({ id: Schema.String, address: Address, createdAt: Schema.DateFromSelf })
export type CardRef = typeof CardRef.Type
