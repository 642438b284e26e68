import { ParseResult, Schema } from "effect"
import { getAddress } from "viem"

export type Address = `0x${string}`

/** An address's shape: 0x and 20 bytes of hex, in any letter case (the checksum is `Address`'s check). */
export const ADDRESS_PATTERN = /^0x[0-9a-fA-F]{40}$/

const isSingleCase = (hex: string) => hex === hex.toLowerCase() || hex === hex.toUpperCase()

/**
 * An EVM address: accepted in any single letter case, decoded (and answered) in its EIP-55
 * checksum form. A mixed-case input whose checksum is wrong is refused, as EIP-55 intends.
 */
export const Address = Schema.transformOrFail(
  Schema.String.pipe(Schema.pattern(ADDRESS_PATTERN, { message: () => "must be a 0x-prefixed 20-byte hex address" })),
  Schema.TemplateLiteral("0x", Schema.String),
  {
    strict: true,
    decode: (text, _, ast) => {
      const checksummed = getAddress(text)
      return isSingleCase(text.slice(2)) || checksummed === text
        ? ParseResult.succeed(checksummed)
        : ParseResult.fail(new ParseResult.Type(ast, text, "has an invalid EIP-55 checksum"))
    },
    encode: ParseResult.succeed
  }
).annotations({ identifier: "Address", description: "EVM address, answered EIP-55 checksummed" })
